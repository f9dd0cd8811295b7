"""``manage.py place_order TOTAL [--fail]``: an order and its receipt task, committed
together; with ``--fail`` the block raises after both, and neither exists."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

import txqueue
from shop.orders import place_order


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("total", type=int)
        parser.add_argument("--fail", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            order = place_order(options["total"])
            if options["fail"]:
                raise CommandError("rolled back on purpose")
        # The wake-up is sent after the commit by a background thread: wait for RabbitMQ
        # to confirm it before this short-lived process exits.
        txqueue.flush()
        self.stdout.write(str(order.pk))
