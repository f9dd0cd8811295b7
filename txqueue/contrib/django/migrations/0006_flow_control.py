"""Flow control: txqueue_queues and txqueue_starts (docs/how-to/flow-control.md): schema
migrations 0005 did not find."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0005_slots")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
