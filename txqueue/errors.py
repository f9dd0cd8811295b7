"""txqueue's exceptions. Users catch these, never a driver's.

TxQueueError
├── ConfigError            bad URL, unknown --app, invalid worker settings
├── ValidationError        bad input at the API edge; ``field`` names the culprit
│   ├── InvalidTypeError   (also a TypeError)
│   ├── InvalidValueError  (also a ValueError)
│   └── WorkflowError      a workflow declared wrong: a cycle, a foreign step, too big
├── StoreError             the database refused or could not be reached
│   ├── SchemaError        txqueue's tables missing or too old (permanent)
│   └── DatabaseLoginError a wrong user or password, no such database (permanent)
├── BrokerError            RabbitMQ refused or could not be reached
│   └── BrokerLoginError   RabbitMQ refused the URL's user or password (permanent)
├── TaskError              a task's own failure as recorded (result not JSON, unstorable)
│   ├── TaskArgumentsError stored arguments that do not fit the handler (no retry)
│   └── StepError          steps that do not fit those recorded (no retry)
├── WorkerError            a part of the worker kept dying: it stopped (exit non-zero)
├── TaskNotFoundError      no task has that id (also a LookupError)
├── TaskStateError         the task's state does not allow it (retry a running task, ...)
│   └── TaskFailedError    a typed ``wait`` found the task failed or cancelled
└── WaitTimeoutError       ``wait`` gave up before the task finished (also a TimeoutError)

PermanentError marks those no retry mends (marked permanent above): a worker part that
raises one is given up on at once; a command fails on one where it would warn of an outage.
"""

from __future__ import annotations

from typing import Any


class TxQueueError(Exception):
    """Root of every exception txqueue raises.

    Example:

    ```python
    try:
        txqueue.retry(conn, task_id)
        txqueue.retry(conn, task_id)  # pending now: not failed or cancelled
    except txqueue.TxQueueError as exc:  # the root of every error txqueue raises
        print(type(exc).__name__, exc)
    ```
    """


class ConfigError(TxQueueError):
    """Configuration that cannot work: a bad URL, an app that cannot be imported.

    Example:

    ```python
    try:
        txqueue.App(database_url="mysql://db/app")
    except txqueue.ConfigError as exc:
        print(exc)  # database_url: ... names what it takes
    ```
    """


class ValidationError(TxQueueError):
    """Input rejected before anything was written.

    Example:

    ```python
    try:
        txqueue.Task("send_receipt", queue="no spaces")
    except txqueue.ValidationError as exc:  # InvalidTypeError or InvalidValueError
        print(exc.field)  # queue
    ```
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class InvalidTypeError(ValidationError, TypeError):
    """A field of the wrong type.

    Example:

    ```python
    try:
        send_receipt.enqueue(conn, order="42")
    except txqueue.InvalidTypeError as exc:  # a TypeError too; nothing was written
        print(exc.field, exc)  # order order: must be int, not str
    ```
    """


class InvalidValueError(ValidationError, ValueError):
    """A field of the right type with a value out of range or malformed.

    Example:

    ```python
    try:
        send_receipt.options(priority=10**6).enqueue(conn, order=42)
    except txqueue.InvalidValueError as exc:  # a ValueError too; nothing was written
        print(exc.field)  # priority
    ```
    """


class WorkflowError(ValidationError, ValueError):
    """A workflow that cannot be written: a cycle, an edge to another workflow's step, an
    empty one, or one past ``txqueue.workflows.workflow``'s ``MAX_STEPS`` or ``MAX_EDGES``.

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    other = txqueue.Workflow("other").step(send_receipt, 1)
    try:
        flow.step(send_receipt, 2).after(other)
    except txqueue.WorkflowError as exc:  # checked before anything is written
        print(exc)
    ```
    """

    def __init__(self, message: str) -> None:
        super().__init__("workflow", message)


class StoreError(TxQueueError):
    """The database failed or could not be reached.

    Example:

    ```python
    closed = psycopg.connect(url)
    closed.close()
    try:
        txqueue.get_task(closed, task_id)
    except txqueue.StoreError as exc:  # the database failed or could not be reached
        print(exc)
    ```
    """


class PermanentError(TxQueueError):
    """A refusal that retrying does not mend: the configuration or the database must be
    changed first. A marker, also inherited by the errors marked permanent.

    Example:

    ```python
    worker = txqueue.Worker(registry, database_url=url, amqp_url=None)
    try:
        worker.run(burst=True)
    except txqueue.PermanentError as exc:  # a wrong password, no tables, ...: no retry mends it
        raise SystemExit(f"txqueue: {exc}")
    ```
    """


class SchemaError(StoreError, PermanentError):
    """txqueue's tables are missing or older than this txqueue: ``txqueue init`` (or
    ``App.init()``) creates or upgrades them. Retrying does not help.

    Example:

    ```python
    try:
        send_receipt.enqueue(conn, order=42)
    except txqueue.SchemaError as exc:  # the tables are missing, or older than this txqueue
        raise SystemExit(f"{exc}")  # ...: run `txqueue init`
    ```
    """


class DatabaseLoginError(StoreError, PermanentError):
    """PostgreSQL refused the connection for good: a wrong user or password, no such
    database or no right to it, a certificate that does not verify. No reconnect mends it:
    a worker stops at once, with this error.

    Example:

    ```python
    missing = url.rsplit("/", 1)[0] + "/no_such_database"
    try:
        txqueue.Worker(registry, database_url=missing, amqp_url=None).run(burst=True)
    except txqueue.DatabaseLoginError as exc:  # a StoreError and a PermanentError
        print(exc)  # worker ... stopped: cannot connect to PostgreSQL (...): ... does not exist
    ```
    """


class BrokerError(TxQueueError):
    """RabbitMQ failed or could not be reached.

    Example:

    ```python
    worker = txqueue.Worker(registry, database_url=url, amqp_url="amqp://guest:wrong@127.0.0.1:5672/")
    try:
        worker.run()
    except txqueue.BrokerError as exc:  # here its BrokerLoginError; outages are retried
        print(exc)
    ```
    """


class BrokerLoginError(BrokerError, PermanentError):
    """RabbitMQ refused the AMQP URL's user or password (ACCESS_REFUSED).

    Example:

    ```python
    worker = txqueue.Worker(registry, database_url=url, amqp_url="amqp://guest:wrong@127.0.0.1:5672/")
    try:
        worker.run()
    except txqueue.BrokerLoginError as exc:  # a PermanentError: no reconnect mends it
        print(exc)  # RabbitMQ at amqp://guest:***@127.0.0.1:5672/ refused the login ...
    ```
    """


class TaskError(TxQueueError):
    """Recorded as a task attempt's error when the failure is txqueue's to report.

    Example:

    ```python
    print([e["message"] for e in txqueue.get_task(conn, task_id).errors])  # each attempt's
    ```
    """


class WorkerError(TxQueueError):
    """A part of the worker died again and again and was given up on: the worker stopped,
    for its service manager to start it afresh.

    Example:

    ```python
    worker = txqueue.Worker(registry, database_url=url, amqp_url=None)
    try:
        worker.run(burst=True)
    except txqueue.WorkerError:  # a part crashed again and again (PermanentError: see there)
        raise  # let the service manager start it again
    ```
    """


class TaskNotFoundError(TxQueueError, LookupError):
    """No task has that id (it never existed, or was pruned).

    Example:

    ```python
    try:
        txqueue.get_task(conn, "01a2228b-5f3e-7c41-9d7e-2b1f0c9a4e12")
    except txqueue.TaskNotFoundError as exc:  # a LookupError too
        print(exc)
    ```
    """


class ScheduleNotFoundError(TxQueueError, LookupError):
    """No periodic schedule has that name.

    Example:

    ```python
    try:
        info = txqueue.get_schedule(conn, "nightly")
    except txqueue.ScheduleNotFoundError:  # a LookupError too
        info = txqueue.create_schedule(conn, "nightly", cron="0 3 * * *", task="send_receipt")
    print(info.next_run)
    ```
    """


class TaskStateError(TxQueueError):
    """The task's state does not allow the operation; ``state`` says what it is.

    Example:

    ```python
    try:
        txqueue.cancel(conn, task_id)  # it has already failed
    except txqueue.TaskStateError as exc:
        print(exc.state)  # failed
    ```
    """

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class WaitTimeoutError(TxQueueError, TimeoutError):
    """``txqueue.wait`` ran out of time; ``state`` is the task's state when it gave up.

    Example:

    ```python
    task_id = send_receipt.enqueue(conn, order=42)
    conn.commit()
    try:
        txqueue.wait(url, task_id, timeout=0.1)  # no worker runs it
    except txqueue.WaitTimeoutError as exc:  # a TimeoutError too
        print(exc.state)  # pending
    ```
    """

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class TaskArgumentsError(TaskError):
    """A task's stored arguments do not fit its handler (a producer sent a wrong one, or
    the handler's signature changed): recorded as the attempt's error, and the task fails
    without retrying. ``field`` names the argument.

    Example:

    ```python
    txqueue.enqueue(conn, txqueue.Task("send_receipt", {"order": "forty-two"}, queue="emails"))
    conn.commit()
    [ran] = txqueue.testing.run_tasks(registry, url)  # the stored arguments do not fit the handler
    print(ran.state, ran.error["type"])  # failed txqueue.errors.TaskArgumentsError
    ```
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TaskExpiredError(TaskError):
    """Recorded as the error of a task claimed past its start deadline (``expires``): it
    fails for good without running.

    Example:

    ```python
    passed = txqueue.get_task(conn, task_id).created_at  # a start deadline already passed
    send_receipt.options(expires=passed).enqueue(conn, order=42)
    conn.commit()
    [ran] = txqueue.testing.run_tasks(registry, url)  # claimed past its start deadline: not run
    print(ran.state, ran.error["type"])  # failed txqueue.errors.TaskExpiredError
    ```
    """


class TimeLimitError(TaskError):
    """Recorded as the error of an attempt stopped at its ``time_limit``; the task is
    retried as after any failure.

    Example:

    ```python
    @registry.task(time_limit=30)  # an attempt still running at 30 s fails with TimeLimitError
    def render(report: int) -> None: ...

    for task in txqueue.find_tasks(conn, txqueue.TaskFilter(failed_with="TimeLimitError")):
        print(task.id, task.errors[-1]["message"])
    ```
    """


class StepError(TaskError):
    """An attempt's steps (``ctx.step``) do not fit those recorded, or two share a name:
    recorded as its error, and the task fails without a retry. ``step`` names the step.

    Example:

    ```python
    error = txqueue.StepError("charge", "came where the recorded step 'reserve' did")
    print(error.step, error)  # charge step 'charge': came where the recorded step ...
    ```
    """

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"step {step!r}: {message}")
        self.step = step


class TaskFailedError(TaskStateError):
    """A typed ``wait`` found the task failed or cancelled: it has no result. ``info`` is
    the task as stored, its error history included.

    Example:

    ```python
    try:
        charge.wait(url, task_id, timeout=5)
    except txqueue.TaskFailedError as exc:  # it failed: there is no result
        print(exc.info.errors[-1]["message"])  # card declined
    ```
    """

    def __init__(self, message: str, info: Any) -> None:
        super().__init__(message, info.state)
        self.info = info
