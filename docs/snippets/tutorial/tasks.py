# --8<-- [start:tasks]
# tasks.py
import txqueue

registry = txqueue.Registry()


@registry.task(queue="emails")
def send_receipt(order: int) -> str:
    print(f"receipt for order {order} sent")
    return f"customer-{order}@example.com"


# --8<-- [end:tasks]
