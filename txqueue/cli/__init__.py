"""The ``txqueue`` command."""

# Commands are listed in `txqueue --help` in the order their modules are imported.
from . import dashboard, operate  # isort: split

from . import cleaning  # isort: split

from . import status  # isort: split

from . import tasks  # isort: split

from . import schedules  # isort: split

from . import demo  # isort: split

from . import queues, workflows  # isort: split

from . import bulk  # isort: split

from . import history
from .app import app


def main(args: list[str] | None = None, prog_name: str = "txqueue") -> None:
    """Run the command line (``args``: instead of ``sys.argv``, as ``manage.py txqueue``
    passes its own)."""
    app(args=args, prog_name=prog_name)


__all__ = [
    "app",
    "bulk",
    "cleaning",
    "dashboard",
    "demo",
    "history",
    "main",
    "operate",
    "queues",
    "schedules",
    "status",
    "tasks",
    "workflows",
]
