"""txqueue's tables as unmanaged models, for the admin: this migration changes no table
(txqueue's own migrations make them), it records the models' state for Django, so that
``makemigrations --check`` finds nothing to do."""

from django.db import migrations, models

from txqueue.contrib.django.fields import TaskIdField, UnixTimeField


def _unmanaged(table: str, ordering: str) -> dict[str, object]:
    return {"db_table": table, "ordering": (ordering,), "managed": False}


class Migration(migrations.Migration):
    dependencies = [("txqueue", "0014_runtime_schedules")]
    operations = [
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("queue", models.TextField(primary_key=True, serialize=False)),
                ("paused", models.BooleanField()),
                ("rate_limit", models.IntegerField(null=True)),
                ("rate_period", models.FloatField(null=True)),
                ("concurrency", models.IntegerField(null=True)),
                ("fair_share", models.BooleanField()),
                ("updated_at", UnixTimeField()),
            ],
            options=_unmanaged("txqueue_queues", "queue"),
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                ("task", models.TextField()),
                ("queue", models.TextField()),
                ("cron", models.TextField()),
                ("timezone", models.TextField()),
                ("payload", models.JSONField(null=True)),
                ("catch_up", models.BooleanField()),
                ("paused", models.BooleanField()),
                ("source", models.TextField()),
                ("last_slot", UnixTimeField()),
                ("updated_at", UnixTimeField()),
            ],
            options=_unmanaged("txqueue_schedules", "name"),
        ),
        migrations.CreateModel(
            name="Task",
            fields=[
                ("id", TaskIdField(primary_key=True, serialize=False)),
                ("name", models.TextField()),
                ("queue", models.TextField()),
                ("state", models.TextField()),
                ("priority", models.IntegerField()),
                ("payload", models.JSONField()),
                ("result", models.JSONField(null=True)),
                ("errors", models.JSONField()),
                ("events", models.JSONField()),
                ("progress", models.JSONField(null=True)),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField(null=True)),
                ("timeout", models.FloatField(null=True)),
                ("unique_key", models.TextField(null=True)),
                ("concurrency_key", models.TextField(null=True)),
                ("worker_id", models.TextField(null=True)),
                ("run_at", UnixTimeField()),
                ("start_time", UnixTimeField(null=True)),
                ("expires_at", UnixTimeField(null=True)),
                ("finished_at", UnixTimeField(null=True)),
                ("created_at", UnixTimeField()),
                ("updated_at", UnixTimeField()),
                ("workflow_id", TaskIdField(null=True)),
                ("step", models.TextField(null=True)),
            ],
            options=_unmanaged("txqueue_tasks", "-id"),
        ),
        migrations.CreateModel(
            name="Workflow",
            fields=[
                ("id", TaskIdField(primary_key=True, serialize=False)),
                ("name", models.TextField()),
                ("steps", models.IntegerField()),
                ("created_at", UnixTimeField()),
            ],
            options=_unmanaged("txqueue_workflows", "-created_at"),
        ),
    ]
