"""The shop's handlers: ``manage.py txqueue worker --app shop.tasks:registry``."""

from typing import Any

from txqueue.contrib.django import Registry

from .models import Order

registry = Registry()


@registry.task("send_receipt", queue="example_shop")
def send_receipt(payload: dict[str, Any]) -> None:
    Order.objects.filter(pk=payload["order"]).update(receipt_sent=True)
