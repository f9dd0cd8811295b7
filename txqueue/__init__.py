"""txqueue: a transactional outbox task queue on PostgreSQL or SQLite.

A task is a row inserted in your own transaction: it exists if and only if that
transaction commits. A wake-up message on RabbitMQ (or, with no broker, within the
enqueuing process) lets a worker start it at once.
"""

from .app import App
from .broker import flush
from .cleaner.report import CleanupReport
from .cleaner.service import Cleaner
from .core.lifecycle import LeasePolicy
from .core.task import Event, Progress, Task, TaskEvent, TaskInfo, TaskState
from .errors import (
    BrokerError,
    BrokerLoginError,
    ConfigError,
    DatabaseLoginError,
    InvalidTypeError,
    InvalidValueError,
    PermanentError,
    ScheduleNotFoundError,
    SchemaError,
    StoreError,
    TaskArgumentsError,
    TaskError,
    TaskExpiredError,
    TaskFailedError,
    TaskNotFoundError,
    TaskStateError,
    TimeLimitError,
    TxQueueError,
    ValidationError,
    WaitTimeoutError,
    WorkerError,
    WorkflowError,
)
from .observability.logs import TaskLogFilter
from .operations.bulk import (
    cancel_tasks,
    cancel_tasks_async,
    delete_tasks,
    delete_tasks_async,
    retry_tasks,
    retry_tasks_async,
)
from .operations.filters import DeadLetterGroup, TaskFilter
from .operations.manage import (
    cancel,
    cancel_async,
    get_task,
    get_task_async,
    history,
    list_tasks,
    list_tasks_async,
    retry,
    retry_async,
    retry_failed,
    retry_failed_async,
)
from .operations.queues import get_queue, limit_queue, list_queues, pause_queue, resume_queue
from .operations.search import (
    count_tasks,
    count_tasks_async,
    dead_letters,
    find_tasks,
    find_tasks_async,
)
from .operations.waiting import wait, wait_async
from .outbox.client import configure, enqueue, enqueue_many, transaction
from .outbox.client_async import enqueue_async, enqueue_many_async, transaction_async
from .schedules.info import ScheduleInfo
from .schedules.runtime import (
    change_schedule,
    create_schedule,
    delete_schedule,
    get_schedule,
    list_schedules,
    pause_schedule,
    resume_schedule,
)
from .store.records import QueueSettings
from .tasks.context import TaskContext
from .tasks.definition import TaskDefinition, TaskOptions
from .tasks.registration import TaskSettings
from .tasks.registry import FailedTask, Registry
from .worker import Worker, WorkerOptions, WorkerSettings
from .workflows.enqueue import enqueue_workflow, enqueue_workflow_async
from .workflows.flows import (
    cancel_workflow,
    cancel_workflow_async,
    get_workflow,
    get_workflow_async,
    wait_workflow,
    wait_workflow_async,
)
from .workflows.graph import StepInfo, WorkflowInfo
from .workflows.readiness import OnFailure
from .workflows.workflow import Outcome, Step, Workflow

__all__ = [
    "App",
    "BrokerError",
    "BrokerLoginError",
    "Cleaner",
    "CleanupReport",
    "ConfigError",
    "DatabaseLoginError",
    "DeadLetterGroup",
    "Event",
    "FailedTask",
    "InvalidTypeError",
    "InvalidValueError",
    "LeasePolicy",
    "OnFailure",
    "Outcome",
    "PermanentError",
    "Progress",
    "QueueSettings",
    "Registry",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SchemaError",
    "Step",
    "StepInfo",
    "StoreError",
    "Task",
    "TaskArgumentsError",
    "TaskContext",
    "TaskDefinition",
    "TaskError",
    "TaskEvent",
    "TaskExpiredError",
    "TaskFailedError",
    "TaskFilter",
    "TaskInfo",
    "TaskLogFilter",
    "TaskNotFoundError",
    "TaskOptions",
    "TaskSettings",
    "TaskState",
    "TaskStateError",
    "TimeLimitError",
    "TxQueueError",
    "ValidationError",
    "WaitTimeoutError",
    "Worker",
    "WorkerError",
    "WorkerOptions",
    "WorkerSettings",
    "Workflow",
    "WorkflowError",
    "WorkflowInfo",
    "cancel",
    "cancel_async",
    "cancel_tasks",
    "cancel_tasks_async",
    "cancel_workflow",
    "cancel_workflow_async",
    "change_schedule",
    "configure",
    "count_tasks",
    "count_tasks_async",
    "create_schedule",
    "dead_letters",
    "delete_schedule",
    "delete_tasks",
    "delete_tasks_async",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "enqueue_workflow",
    "enqueue_workflow_async",
    "find_tasks",
    "find_tasks_async",
    "flush",
    "get_queue",
    "get_schedule",
    "get_task",
    "get_task_async",
    "get_workflow",
    "get_workflow_async",
    "history",
    "limit_queue",
    "list_queues",
    "list_schedules",
    "list_tasks",
    "list_tasks_async",
    "pause_queue",
    "pause_schedule",
    "resume_queue",
    "resume_schedule",
    "retry",
    "retry_async",
    "retry_failed",
    "retry_failed_async",
    "retry_tasks",
    "retry_tasks_async",
    "transaction",
    "transaction_async",
    "wait",
    "wait_async",
    "wait_workflow",
    "wait_workflow_async",
]
