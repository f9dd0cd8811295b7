"""The service's tasks: its own worker runs them (app.py's lifespan), or a separate one
does: ``txqueue worker --app examples.fastapi_app.tasks:registry``."""

import txqueue

registry = txqueue.Registry()


@registry.task(queue="example_receipts", atomic=True, context=True)
def send_receipt(ctx: txqueue.TaskContext, order: int) -> None:
    # A real handler would e-mail the customer first. Atomic: the mark is written on the
    # worker's transaction (psycopg) with the task's success, so exactly once.
    ctx.conn.execute("UPDATE orders SET receipt_sent = true WHERE id = %s", (order,))
