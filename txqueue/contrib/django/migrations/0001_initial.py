"""txqueue's tables, by the numbered migrations of schema.sql / schema.sqlite.sql.

A later txqueue release that adds a schema migration ships a Django migration that runs
the same function: each applies what ``txqueue_migrations`` does not list yet.
"""

from typing import Any

from django.db import migrations


def apply(apps: Any, schema_editor: Any) -> None:
    from txqueue.contrib.django import apply_schema

    apply_schema(schema_editor.connection)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    # Not reversed: dropping the tables would drop committed tasks. Drop them by hand
    # (txqueue_tasks, txqueue_workers, txqueue_schedules, txqueue_leaders,
    # txqueue_migrations) if that is what you mean.
    operations = [migrations.RunPython(apply, migrations.RunPython.noop)]
