"""``manage.py place_order TOTAL [--fail]``: an order and its receipt task, committed
together; with ``--fail`` the block raises after both, and neither exists."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

import txqueue
from shop.models import Order
from shop.tasks import send_receipt


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("total", type=int)
        parser.add_argument("--fail", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        # --8<-- [start:atomic]
        with transaction.atomic():
            order = Order.objects.create(total=options["total"])
            send_receipt.enqueue(connection, order=order.pk)
            if options["fail"]:
                raise CommandError("rolled back on purpose")
        # The wake-up is sent after the commit by a background thread: wait for RabbitMQ
        # to confirm it before this short-lived process exits.
        txqueue.flush()
        # --8<-- [end:atomic]
        self.stdout.write(str(order.pk))
