"""The ``txqueue`` command."""

from . import operate, tasks
from .app import app


def main() -> None:
    app()


__all__ = ["app", "main", "operate", "tasks"]
