"""Fair share (docs/how-to/flow-control.md): the queues' fair_share setting and the index of
pending tasks by key, schema migrations 0006 did not find."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0006_flow_control")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
