"""``python manage.py txqueue worker|cleaner|status|…``: the txqueue CLI inside Django.

The database is ``DATABASES["default"]`` (``--database ALIAS`` for another) unless
``TXQUEUE_DATABASE_URL`` or ``--database-url`` says otherwise, the broker
``settings.TXQUEUE_AMQP_URL`` unless ``TXQUEUE_AMQP_URL`` or ``--amqp-url`` does; Django is
set up, so handlers use the ORM.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from txqueue import config
from txqueue.contrib.django import amqp_url, database_url


class Command(BaseCommand):
    help = "Run a txqueue command (worker, cleaner, status, list, ...) on Django's database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default="default", help="The DATABASES alias.")
        parser.add_argument("args", nargs="*", help="txqueue's command and its options.")

    def run_from_argv(self, argv: list[str]) -> None:
        # Everything after `txqueue` is the CLI's own, options included: argparse must not
        # read them. Only a leading --database ALIAS is ours.
        args = argv[2:]
        alias = "default"
        if args[:1] == ["--database"] and len(args) > 1:
            alias, args = args[1], args[2:]
        self.execute(*args, database=alias, no_color=False, force_color=False, skip_checks=True)

    def handle(self, *args: str, **options: Any) -> None:
        from txqueue.cli import main

        os.environ.setdefault(config.DATABASE_ENV, database_url(options["database"]))
        # A process pool's children are set up as this process was, before the registry.
        os.environ.setdefault("TXQUEUE_POOL_SETUP", "django:setup")
        broker = amqp_url()
        if broker is not None:
            os.environ.setdefault(config.AMQP_ENV, broker)
        main(list(args), prog_name="manage.py txqueue")
