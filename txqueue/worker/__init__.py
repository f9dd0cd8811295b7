"""The worker: wake-ups and polls become claims, claims become handler runs, runs outcomes.

Its parts, each on its own thread and owning what it touches, pass typed messages
(``board``) and are restarted by the ``supervisor`` when they die:
- the claimer (the thread that calls ``run``): claims, the commit check (``triage``), the
  idle poll;
- the consumer (with a broker, in ``txqueue.broker``): hands wake-ups to the claimer;
- the handler pool (``concurrency`` threads, plus one event loop for ``async def``);
- the recorder: writes outcomes in batches and releases what is left at shutdown; and
  beside it the alert runner for ``on_failed`` hooks;
- the lease keeper: extends leases, answers ``ctx.heartbeat()``, flags cancellations.
Only the claimer, the recorder and the lease keeper talk to the database, each on its
own connection (``board.Link``), so none can hold up another.
"""

from .core import Worker
from .fleet import Fleet
from .settings import WorkerOptions, WorkerSettings

__all__ = ["Fleet", "Worker", "WorkerOptions", "WorkerSettings"]
