"""How-to "Flow control": the calls as written, then what they left in the database."""

import os

import psycopg

import txqueue

conn = psycopg.connect(os.environ["TXQUEUE_DATABASE_URL"])
registry = txqueue.Registry()

# --8<-- [start:queues]
txqueue.pause_queue(conn, "emails")  # its tasks stay pending; enqueues go on
txqueue.resume_queue(conn, "emails")  # workers are woken for its ripe tasks
txqueue.limit_queue(conn, "crm", rate_limit="50/s", concurrency=5)
txqueue.limit_queue(conn, "crm", rate_limit=None)  # None removes a limit; one left out stays
txqueue.limit_queue(conn, "reports", fair_share=True)  # its tasks' keys take turns
txqueue.get_queue(conn, "crm")  # QueueSettings(queue='crm', paused=False, rate_limit=None, ...)
txqueue.list_queues(conn)  # every queue that is paused, limited or shared fairly
conn.commit()
# --8<-- [end:queues]


# --8<-- [start:keys]
@registry.task(queue="crm", concurrency_key="account_id", concurrency_limit=1)
def sync_account(account_id: int) -> None: ...  # one at a time per account


@registry.task(queue="crm", rate_limit="10/s", rate_limit_key="token")
def call_api(token: str, path: str) -> None: ...  # ten calls a second per API token


@registry.task(concurrency_limit=3)
def rebuild_index() -> None: ...  # no key: three at once of this task


@registry.task(queue="reports", concurrency_key="tenant_id")
def build_report(tenant_id: str, month: str) -> None: ...  # a key alone: for fair share


# --8<-- [end:keys]


crm = txqueue.get_queue(conn, "crm")
assert (crm.rate_limit, crm.concurrency, crm.paused) == (None, 5, False), crm
assert [(q.queue, q.fair_share) for q in txqueue.list_queues(conn)] == [
    ("crm", False),
    ("reports", True),
], txqueue.list_queues(conn)
build_report.enqueue(conn, "acme", "2026-11")
[task] = txqueue.list_tasks(conn, name="build_report")
conn.commit()
row = conn.execute("SELECT concurrency_key FROM txqueue_tasks WHERE id = %s", (task.id,))
assert row.fetchone() == ("tenant_id:acme",)
