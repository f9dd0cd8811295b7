"""A running task's progress: txqueue_tasks.progress."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0011_sql_enqueue")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
