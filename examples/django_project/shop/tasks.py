"""The shop's handlers: ``manage.py txqueue worker --app shop.tasks:registry``."""

# --8<-- [start:tasks]
from txqueue.contrib.django import Registry

from .models import Order

registry = Registry()


@registry.task(queue="example_shop")
def send_receipt(order: int) -> None:
    Order.objects.filter(pk=order).update(receipt_sent=True)


# --8<-- [end:tasks]
