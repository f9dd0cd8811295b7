"""txqueue: a transactional outbox task queue on PostgreSQL or SQLite.

A task is a row inserted in your own transaction: it exists if and only if that
transaction commits. A wake-up message on RabbitMQ (or, with no broker, within the
enqueuing process) lets a worker start it at once.
"""

from .app import App
from .broker import flush
from .cleaner import Cleaner, CleanupReport
from .client import configure, enqueue, enqueue_many, transaction
from .client_async import enqueue_async, enqueue_many_async, transaction_async
from .context import TaskContext
from .errors import (
    BrokerError,
    ConfigError,
    InvalidTypeError,
    InvalidValueError,
    SchemaError,
    StoreError,
    TaskArgumentsError,
    TaskError,
    TaskFailedError,
    TaskNotFoundError,
    TaskStateError,
    TxQueueError,
    ValidationError,
    WaitTimeoutError,
    WorkerError,
)
from .lifecycle import LeasePolicy
from .logs import TaskLogFilter
from .manage import cancel, get_task, list_tasks, retry, retry_failed
from .registry import FailedTask, Registry, TaskDefinition, TaskOptions
from .task import Task, TaskInfo, TaskState
from .waiting import wait, wait_async
from .worker import Worker

__all__ = [
    "App",
    "BrokerError",
    "Cleaner",
    "CleanupReport",
    "ConfigError",
    "FailedTask",
    "InvalidTypeError",
    "InvalidValueError",
    "LeasePolicy",
    "Registry",
    "SchemaError",
    "StoreError",
    "Task",
    "TaskArgumentsError",
    "TaskContext",
    "TaskDefinition",
    "TaskError",
    "TaskFailedError",
    "TaskInfo",
    "TaskLogFilter",
    "TaskNotFoundError",
    "TaskOptions",
    "TaskState",
    "TaskStateError",
    "TxQueueError",
    "ValidationError",
    "WaitTimeoutError",
    "Worker",
    "WorkerError",
    "cancel",
    "configure",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "flush",
    "get_task",
    "list_tasks",
    "retry",
    "retry_failed",
    "transaction",
    "transaction_async",
    "wait",
    "wait_async",
]
