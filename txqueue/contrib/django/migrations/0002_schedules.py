"""txqueue_schedules (periodic tasks): the schema migrations 0001 did not find yet."""

from typing import Any

from django.db import migrations


def apply(apps: Any, schema_editor: Any) -> None:
    from txqueue.contrib.django import apply_schema

    apply_schema(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0001_initial")]
    operations = [migrations.RunPython(apply, migrations.RunPython.noop)]
