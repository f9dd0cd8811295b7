"""A task's start deadline and time limit: txqueue_tasks.start_by, expires_in and
time_limit, and txqueue_enqueue's three arguments for them."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0012_progress")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
