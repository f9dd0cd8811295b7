"""procrastinate: ``procrastinate --app bench_procrastinate.app --log-level warning worker
--concurrency 30``, two of them, woken by LISTEN/NOTIFY (its default). The task is ``async
def``, so the 30 jobs of a worker run in its event loop: 30 is the figure of its "Execute
multiple jobs at the same time" how-to (the default, 1, runs one job at a time). Its log
level is warning: at its default, INFO, it logs two lines for every job, which no other
system here does at its own default.

    python -m bench_procrastinate drain N | latency N RATE FIRST
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import procrastinate
from harness import produce, stamp

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["PEERS_DATABASE_URL"])
)


@app.task(name="stamp", queue="peers")
async def stamp_task(i: int) -> None:
    stamp(i)


def main() -> None:
    # The sync API on the same app: each defer is one INSERT, its own transaction.
    with app.open():

        def batch(indices: Sequence[int]) -> None:
            stamp_task.batch_defer(*({"i": i} for i in indices))

        def one(index: int) -> None:
            stamp_task.defer(i=index)

        produce(batch, one)


if __name__ == "__main__":
    main()
