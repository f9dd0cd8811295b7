# --8<-- [start:tasks]
# myapp/tasks.py
from dataclasses import dataclass
from decimal import Decimal

import txqueue

registry = txqueue.Registry()


@dataclass
class Receipt:
    order: int
    total: Decimal


@registry.task(queue="emails", max_attempts=5, timeout=30)
def send_receipt(order: int, copy_to: list[str] | None = None) -> Receipt:
    ...  # what it returns is stored as the task's result
    return Receipt(order, Decimal("9.90"))


# --8<-- [end:tasks]
