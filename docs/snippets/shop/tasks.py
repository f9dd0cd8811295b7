# --8<-- [start:tasks]
# shop/tasks.py
from dataclasses import dataclass
from decimal import Decimal

import txqueue

registry = txqueue.Registry()


@dataclass
class Line:
    sku: str
    price: Decimal


@registry.task(queue="emails", max_attempts=5, timeout=30, backoff=2.0)
def send_receipt(order: int, lines: list[Line], note: str | None = None) -> str:
    return f"receipt for order {order}: {sum(line.price for line in lines)}"


# --8<-- [end:tasks]
