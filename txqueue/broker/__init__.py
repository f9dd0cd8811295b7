"""RabbitMQ: the only package that imports pika.

Wake-ups are published by a background publisher per process, and one per ``txqueue.App``
(``publisher``, ``PublisherSlot``, ``flush``), consumed by each worker (``Consumer``), and
queues inspected by ``check``. A message is only a hint: the row is the truth, so a lost one
delays a task and never loses it.
"""

from .admin import check, delete_queue
from .consumer import Consumer
from .publisher import Publisher
from .slots import SHARED, PublisherSlot, flush, publisher

__all__ = [
    "SHARED",
    "Consumer",
    "Publisher",
    "PublisherSlot",
    "check",
    "delete_queue",
    "flush",
    "publisher",
]
