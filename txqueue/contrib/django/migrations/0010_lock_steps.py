"""Workflows: the children of the steps a write ends locked by one function."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0009_workflows")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
