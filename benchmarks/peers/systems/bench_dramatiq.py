"""Dramatiq on RabbitMQ: ``dramatiq bench_dramatiq --processes 2 --threads 8``, which are
also its CLI's defaults on this machine (processes: the CPU count; threads: 8). Its default
middleware and broker options (no publisher confirms) are kept.

    python -m bench_dramatiq drain N | latency N RATE FIRST | chain N
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import dramatiq
from dramatiq import pipeline
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from harness import produce, stamp

broker = RabbitmqBroker(url=os.environ["PEERS_AMQP_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="peers")
def stamp_task(i: int) -> None:
    stamp(i)


@dramatiq.actor(queue_name="peers")
def link(i: int) -> int:
    stamp(i)
    return i + 1


def main() -> None:
    def batch(indices: Sequence[int]) -> None:
        for i in indices:
            stamp_task.send(i)

    def chain(n: int) -> None:
        # A pipeline: each message's result is piped into the next (no results backend).
        pipeline([link.message(0), *(link.message() for _ in range(n - 1))]).run()

    try:
        produce(batch, stamp_task.send, chain=chain)
    finally:
        broker.close()


if __name__ == "__main__":
    main()
