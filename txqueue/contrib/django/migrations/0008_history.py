"""Each task's history (``TaskInfo.events``): the column schema migrations 0007 did not find."""

from django.db import migrations

from txqueue.contrib.django import migrate


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0007_fair_share")]
    operations = [migrations.RunPython(migrate, migrations.RunPython.noop)]
