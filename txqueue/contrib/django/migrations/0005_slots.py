"""txqueue_tasks partitioned into slots, and txqueue_unique_keys
(docs/explanation/storage.md): schema migrations 0004 did not find."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0004_leaders")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
