"""txqueue at its defaults: workers run ``txqueue worker --app bench_txqueue:registry``
(8 threads each), tasks live in PostgreSQL and RabbitMQ carries their wake-ups.

    python -m bench_txqueue drain N | latency N RATE FIRST | chain N | fanin N | cpu N
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import psycopg
from harness import burn, produce, stamp

import txqueue
from txqueue import Task

registry = txqueue.Registry()


@registry.task("stamp", queue="peers")
def stamp_task(payload: dict[str, int]) -> None:
    stamp(payload["i"])


@registry.task("burn", queue="peers")
def burn_task(i: int) -> None:
    burn(i)


@registry.task("link", queue="peers")
def link(i: int) -> int:
    stamp(i)
    return i + 1


@registry.task("part", queue="peers")
def part(i: int) -> int:
    stamp(i)
    return i


@registry.task("join", queue="peers")
def join(parts: list[int], n: int) -> None:
    assert len(parts) == n
    stamp(n)


def main() -> None:
    with psycopg.connect(os.environ["PEERS_DATABASE_URL"]) as conn:

        def batch(indices: Sequence[int]) -> None:
            with txqueue.transaction(conn):
                txqueue.enqueue_many(
                    conn, [Task("stamp", {"i": i}, queue="peers") for i in indices]
                )

        def one(index: int) -> None:
            with txqueue.transaction(conn):
                txqueue.enqueue(conn, Task("stamp", {"i": index}, queue="peers"))

        def chain(n: int) -> None:
            flow = txqueue.Workflow("chain")
            step = flow.step(link, 0)
            for _ in range(n - 1):
                step = flow.step(link, step.result)
            with txqueue.transaction(conn):
                txqueue.enqueue_workflow(conn, flow)

        def fan_in(n: int) -> None:
            flow = txqueue.Workflow("fan-in")
            flow.step(join, flow.results([flow.step(part, i) for i in range(n)]), n)
            with txqueue.transaction(conn):
                txqueue.enqueue_workflow(conn, flow)

        def burns(indices: Sequence[int]) -> None:
            with txqueue.transaction(conn):
                txqueue.enqueue_many(conn, [burn_task.task(i) for i in indices])

        produce(batch, one, chain=chain, fan_in=fan_in, burns=burns)
    # The wake-ups leave from a background publisher: see them confirmed before exiting.
    if not txqueue.flush(60):
        raise SystemExit("RabbitMQ did not confirm the wake-ups")


if __name__ == "__main__":
    main()
