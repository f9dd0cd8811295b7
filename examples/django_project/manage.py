#!/usr/bin/env python
"""The example Django project's manage.py (DATABASE_URL: postgresql://… or sqlite:///…;
AMQP_URL, optional: amqp://…)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
