"""Dramatiq on RabbitMQ: ``dramatiq bench_dramatiq --processes 2 --threads 8``, which are
also its CLI's defaults on this machine (processes: the CPU count; threads: 8). Its default
middleware and broker options (no publisher confirms) are kept.

    python -m bench_dramatiq drain N | latency N RATE FIRST
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from harness import produce, stamp

broker = RabbitmqBroker(url=os.environ["PEERS_AMQP_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="peers")
def stamp_task(i: int) -> None:
    stamp(i)


def main() -> None:
    def batch(indices: Sequence[int]) -> None:
        for i in indices:
            stamp_task.send(i)

    try:
        produce(batch, stamp_task.send)
    finally:
        broker.close()


if __name__ == "__main__":
    main()
