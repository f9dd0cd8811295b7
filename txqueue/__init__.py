"""txqueue: a transactional outbox task queue on PostgreSQL or SQLite.

A task is a row inserted in your own transaction: it exists if and only if that
transaction commits. A wake-up message on RabbitMQ (or, with no broker, within the
enqueuing process) lets a worker start it at once.
"""

from .app import DEFAULTS, App
from .broker import flush
from .cleaner.report import CleanupReport
from .cleaner.service import Cleaner
from .core.lifecycle import LeasePolicy
from .core.stored import Event, Progress, RecordedStep, TaskEvent, TaskInfo
from .core.task import Task, TaskState
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
    StepError,
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
from .operations.filters import DeadLetterGroup, TaskFilter
from .operations.waiting import wait, wait_async
from .outbox.client import configure, transaction
from .outbox.client_async import transaction_async
from .schedules.info import ScheduleInfo
from .store.settings import QueueSettings
from .tasks.context import TaskContext
from .tasks.definition import TaskDefinition, TaskOptions
from .tasks.registration import TaskSettings
from .tasks.registry import FailedTask, Registry
from .tasks.steps import ChildFailedError, SignalTimeoutError
from .worker import Fleet, Worker, WorkerOptions, WorkerSettings
from .workflows.graph import StepInfo, WorkflowInfo, WorkflowSummary
from .workflows.readiness import OnFailure
from .workflows.workflow import Outcome, Step, Workflow

# The calls on your connection: the methods of the process's defaults, as an App's are
# of that App (``app.Calls``).
cancel = DEFAULTS.cancel
cancel_async = DEFAULTS.cancel_async
cancel_tasks = DEFAULTS.cancel_tasks
cancel_tasks_async = DEFAULTS.cancel_tasks_async
cancel_workflow = DEFAULTS.cancel_workflow
cancel_workflow_async = DEFAULTS.cancel_workflow_async
change_schedule = DEFAULTS.change_schedule
count_tasks = DEFAULTS.count_tasks
count_tasks_async = DEFAULTS.count_tasks_async
create_schedule = DEFAULTS.create_schedule
dead_letters = DEFAULTS.dead_letters
delete_schedule = DEFAULTS.delete_schedule
delete_tasks = DEFAULTS.delete_tasks
delete_tasks_async = DEFAULTS.delete_tasks_async
enqueue = DEFAULTS.enqueue
enqueue_async = DEFAULTS.enqueue_async
enqueue_many = DEFAULTS.enqueue_many
enqueue_many_async = DEFAULTS.enqueue_many_async
enqueue_workflow = DEFAULTS.enqueue_workflow
enqueue_workflow_async = DEFAULTS.enqueue_workflow_async
find_tasks = DEFAULTS.find_tasks
find_tasks_async = DEFAULTS.find_tasks_async
get_queue = DEFAULTS.get_queue
get_schedule = DEFAULTS.get_schedule
get_task = DEFAULTS.get_task
get_task_async = DEFAULTS.get_task_async
get_workflow = DEFAULTS.get_workflow
get_workflow_async = DEFAULTS.get_workflow_async
history = DEFAULTS.history
limit_queue = DEFAULTS.limit_queue
list_queues = DEFAULTS.list_queues
list_schedules = DEFAULTS.list_schedules
list_tasks = DEFAULTS.list_tasks
list_tasks_async = DEFAULTS.list_tasks_async
list_workflows = DEFAULTS.list_workflows
list_workflows_async = DEFAULTS.list_workflows_async
pause_queue = DEFAULTS.pause_queue
pause_schedule = DEFAULTS.pause_schedule
resume_queue = DEFAULTS.resume_queue
resume_schedule = DEFAULTS.resume_schedule
retry = DEFAULTS.retry
retry_async = DEFAULTS.retry_async
retry_failed = DEFAULTS.retry_failed
retry_failed_async = DEFAULTS.retry_failed_async
retry_tasks = DEFAULTS.retry_tasks
retry_tasks_async = DEFAULTS.retry_tasks_async
signal = DEFAULTS.signal
signal_async = DEFAULTS.signal_async
wait_workflow = DEFAULTS.wait_workflow
wait_workflow_async = DEFAULTS.wait_workflow_async

__all__ = [
    "App",
    "BrokerError",
    "BrokerLoginError",
    "ChildFailedError",
    "Cleaner",
    "CleanupReport",
    "ConfigError",
    "DatabaseLoginError",
    "DeadLetterGroup",
    "Event",
    "FailedTask",
    "Fleet",
    "InvalidTypeError",
    "InvalidValueError",
    "LeasePolicy",
    "OnFailure",
    "Outcome",
    "PermanentError",
    "Progress",
    "QueueSettings",
    "RecordedStep",
    "Registry",
    "ScheduleInfo",
    "ScheduleNotFoundError",
    "SchemaError",
    "SignalTimeoutError",
    "Step",
    "StepError",
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
    "WorkflowSummary",
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
    "list_workflows",
    "list_workflows_async",
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
    "signal",
    "signal_async",
    "transaction",
    "transaction_async",
    "wait",
    "wait_async",
    "wait_workflow",
    "wait_workflow_async",
]
