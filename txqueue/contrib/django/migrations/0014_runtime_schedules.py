"""Schedules made at run time: txqueue_schedules.payload, catch_up, paused and source."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0013_deadlines")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
