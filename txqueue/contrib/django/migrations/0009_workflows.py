"""Workflows (``txqueue.Workflow``): the waiting state, the step columns, the edges."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0008_history")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
