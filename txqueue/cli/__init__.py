"""The ``txqueue`` command."""

from . import dashboard, operate, tasks
from .app import app


def main(args: list[str] | None = None, prog_name: str = "txqueue") -> None:
    """Run the command line (``args``: instead of ``sys.argv``, as ``manage.py txqueue``
    passes its own)."""
    app(args=args, prog_name=prog_name)


__all__ = ["app", "dashboard", "main", "operate", "tasks"]
