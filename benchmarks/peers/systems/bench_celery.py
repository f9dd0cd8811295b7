"""Celery on RabbitMQ: ``celery -A bench_celery worker --pool prefork --concurrency 2``.

Prefork is Celery's default pool and 2 its default concurrency here (the CPU count); the
threads pool would put both slots in one process, under one GIL, which the other systems'
two processes are not. For short tasks its Optimizing guide ("Prefetch Limits") asks for
a large prefetch multiplier, "say 64, or 128": 128. Results ignored, but for the chord's
parts: a chord needs a result backend, Redis here (Celery's documented choice for chords:
it counts the parts with one INCR each).

    python -m bench_celery drain N | latency N RATE FIRST | chain N | fanin N | cpu N
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from celery import Celery, chain, chord
from harness import burn, produce, stamp

app = Celery(
    "bench_celery", broker=os.environ["PEERS_AMQP_URL"], backend=os.environ["PEERS_REDIS_URL"]
)
app.conf.update(
    task_default_queue="peers",
    task_ignore_result=True,
    worker_prefetch_multiplier=128,
    broker_connection_retry_on_startup=True,
)


@app.task(name="stamp")
def stamp_task(i: int) -> None:
    stamp(i)


@app.task(name="burn")
def burn_task(i: int) -> None:
    burn(i)


@app.task(name="link")
def link(i: int) -> int:
    stamp(i)
    return i + 1


@app.task(name="part", ignore_result=False)
def part(i: int) -> int:
    stamp(i)
    return i


@app.task(name="join")
def join(parts: list[int], n: int) -> None:
    assert len(parts) == n
    stamp(n)


def main() -> None:
    def batch(indices: Sequence[int]) -> None:
        for i in indices:
            stamp_task.delay(i)

    def chained(n: int) -> None:
        # A canvas chain: each task's result is the next one's argument, sent by the
        # worker that ran it (no result backend needed).
        chain(link.s(0), *(link.s() for _ in range(n - 1))).delay()

    def fan_in(n: int) -> None:
        chord(part.s(i) for i in range(n))(join.s(n))

    def burns(indices: Sequence[int]) -> None:
        for i in indices:
            burn_task.delay(i)

    produce(batch, stamp_task.delay, chain=chained, fan_in=fan_in, burns=burns)


if __name__ == "__main__":
    main()
