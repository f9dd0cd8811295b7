"""RabbitMQ: the only package that imports pika.

Wake-ups are published by a background publisher per process (``publisher``, ``flush``),
consumed by each worker (``Consumer``), and queues inspected by ``check``. A message is
only a hint: the row is the truth, so a lost one delays a task and never loses it.
"""

from .admin import check, delete_queue
from .consumer import Consumer
from .publisher import Publisher, flush, publisher

__all__ = ["Consumer", "Publisher", "check", "delete_queue", "flush", "publisher"]
