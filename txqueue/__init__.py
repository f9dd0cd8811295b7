"""txqueue: a transactional outbox task queue on PostgreSQL and RabbitMQ.

A task is a row inserted in your own transaction: it exists if and only if that
transaction commits. A wake-up message on RabbitMQ lets a worker start it at once.
"""

from .client import configure, enqueue, enqueue_many, transaction
from .errors import (
    BrokerError,
    ConfigError,
    InvalidTypeError,
    InvalidValueError,
    StoreError,
    TaskError,
    TxQueueError,
    ValidationError,
)
from .registry import FailedTask, Registry, TaskContext, TaskDefinition
from .task import Task
from .worker import Worker

__all__ = [
    "BrokerError",
    "ConfigError",
    "FailedTask",
    "InvalidTypeError",
    "InvalidValueError",
    "Registry",
    "StoreError",
    "Task",
    "TaskContext",
    "TaskDefinition",
    "TaskError",
    "TxQueueError",
    "ValidationError",
    "Worker",
    "configure",
    "enqueue",
    "enqueue_many",
    "transaction",
]
