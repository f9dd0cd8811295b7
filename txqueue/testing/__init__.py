"""Testing code that enqueues, and the tasks themselves, with no broker and no worker:

- ``run_tasks(registry, url)`` runs what was enqueued, inline, until nothing is ripe;
- ``captured(url)`` collects what a block of code enqueued and committed;
- ``Clock(url)`` moves the database's time forward, for delays, backoff and schedules;
- the pytest plugin (installed with txqueue) gives the fixtures ``txqueue_sqlite``,
  ``txqueue_postgres`` and ``txqueue_clock``.
"""

from .capture import Enqueued, captured
from .clock import Clock
from .inline import Ran, TooManyTasksError, run_tasks

__all__ = ["Clock", "Enqueued", "Ran", "TooManyTasksError", "captured", "run_tasks"]
