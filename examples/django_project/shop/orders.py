"""The shop's own code: ``place_order``, which the command and the tests call."""

# --8<-- [start:atomic]
from django.db import connection, transaction

from .models import Order
from .tasks import send_receipt


def place_order(total: int) -> Order:
    """An order and its receipt task, committed together or not at all."""
    with transaction.atomic():
        order = Order.objects.create(total=total)
        send_receipt.enqueue(connection, order=order.pk)
    return order


# --8<-- [end:atomic]
