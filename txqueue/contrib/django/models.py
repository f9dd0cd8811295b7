"""txqueue's tables as Django models, for the admin (``admin.py``) and read-only queries.

Unmanaged: txqueue's own migrations make and change the tables, and every change to a
task, queue or schedule goes through txqueue's functions, never ``save()``, so that it
keeps the guarantees (a retry's wake-up, a schedule's compare-and-set, the history).
"""

from __future__ import annotations

from django.db import models

from .fields import TaskIdField, UnixTimeField


class Task(models.Model):
    id = TaskIdField(primary_key=True)
    name = models.TextField()
    queue = models.TextField()
    state = models.TextField()
    priority = models.IntegerField()
    payload = models.JSONField()
    result = models.JSONField(null=True)
    errors = models.JSONField()
    events = models.JSONField()
    progress = models.JSONField(null=True)
    attempts = models.IntegerField()
    max_attempts = models.IntegerField(null=True)
    timeout = models.FloatField(null=True)
    unique_key = models.TextField(null=True)
    concurrency_key = models.TextField(null=True)
    worker_id = models.TextField(null=True)
    run_at = UnixTimeField()
    start_time = UnixTimeField(null=True)
    expires_at = UnixTimeField(null=True)
    finished_at = UnixTimeField(null=True)
    created_at = UnixTimeField()
    updated_at = UnixTimeField()
    workflow_id = TaskIdField(null=True)
    step = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "txqueue_tasks"
        ordering = ("-id",)  # ids are UUIDv7: the newest first

    def __str__(self) -> str:
        return f"{self.name} {self.id}"


class Queue(models.Model):
    """A queue that is paused, limited or shared fairly (one never set has no row)."""

    queue = models.TextField(primary_key=True)
    paused = models.BooleanField()
    rate_limit = models.IntegerField(null=True)
    rate_period = models.FloatField(null=True)
    concurrency = models.IntegerField(null=True)
    fair_share = models.BooleanField()
    updated_at = UnixTimeField()

    class Meta:
        managed = False
        db_table = "txqueue_queues"
        ordering = ("queue",)

    def __str__(self) -> str:
        return str(self.queue)


class Schedule(models.Model):
    name = models.TextField(primary_key=True)
    task = models.TextField()
    queue = models.TextField()
    cron = models.TextField()
    timezone = models.TextField()
    payload = models.JSONField(null=True)
    catch_up = models.BooleanField()
    paused = models.BooleanField()
    source = models.TextField()
    last_slot = UnixTimeField()
    updated_at = UnixTimeField()

    class Meta:
        managed = False
        db_table = "txqueue_schedules"
        ordering = ("name",)

    def __str__(self) -> str:
        return str(self.name)


class Workflow(models.Model):
    id = TaskIdField(primary_key=True)
    name = models.TextField()
    steps = models.IntegerField()
    created_at = UnixTimeField()

    class Meta:
        managed = False
        db_table = "txqueue_workflows"
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name} {self.id}"
