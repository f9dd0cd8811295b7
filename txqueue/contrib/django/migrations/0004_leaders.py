"""txqueue_leaders, the lease that keeps one cleaner loop active: schema migrations 0003
did not find."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0003_trace_context")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
