"""``txqueue dashboard``: queues, tasks and workers in a browser (the ``dashboard`` extra)."""

from .app import create_app, listen, loopback, serve

__all__ = ["create_app", "listen", "loopback", "serve"]
