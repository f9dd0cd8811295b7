"""Enqueue from SQL: txqueue_enqueue() and txqueue_uuid7()."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0010_lock_steps")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
