"""trace_context, the trace each task was enqueued in: schema migrations 0002 did not find."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0002_schedules")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
