"""txqueue in the Django admin: tasks (filtered by state, queue and name, with their
history; retry and cancel), queues (pause, resume, limits), schedules (both kinds; make,
change, pause, resume and delete those made at run time) and workflows (their steps;
cancel). Django loads this module when ``django.contrib.admin`` is installed.

Pages read the project's database through the unmanaged models; every change goes
through txqueue's own functions on that database's connection, in a transaction of its
own, and a task's history names the admin user (``by="admin:<username>"``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db import connections, transaction
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

import txqueue

from ... import schedules as timetable
from ...errors import (
    ConfigError,
    ScheduleNotFoundError,
    TaskNotFoundError,
    TaskStateError,
    ValidationError,
)
from ...limits import check_concurrency, format_rate, parse_rate
from ...periodic import Schedule as Cron
from ...task import STATES, check_queue
from .models import Queue, Schedule, Task, Workflow

COUNT_CAP = 10_000
"""Rows a list counts, and so pages through, at most: past them, the filters narrow it."""
RECENT = 10_000
"""The newest tasks whose queues and names the filters offer: reading every row's would
scan the table on each page."""
Html = Any  # Django's SafeString: Django ships no types
MANY = 1_000
"""Tasks or workflows an action changes at most: more is a bulk operation's
(``txqueue bulk``), in batches of its own."""


class CappedPaginator(Paginator):
    """Counts up to ``COUNT_CAP`` rows, so that a list of millions of tasks pages without
    counting them all."""

    @cached_property
    def count(self) -> int:
        return int(self.object_list[:COUNT_CAP].count())


@contextmanager
def _connection(db: str) -> Iterator[Any]:
    """The connection of Django's database ``db``, in a transaction of its own: a change's
    wake-ups leave after its commit."""
    with transaction.atomic(using=db):
        yield connections[db]


def _by(request: Any) -> str:
    return f"admin:{request.user.get_username()}"


def _each(
    model_admin: admin.ModelAdmin,
    request: Any,
    queryset: Any,
    call: Callable[[Any, Any], object],
    done: str,
) -> None:
    """``call(conn, pk)`` for each of the first ``MANY`` rows selected, one transaction
    each; those that moved on meanwhile are counted, not failed."""
    changed = passed = 0
    for pk in queryset.values_list("pk", flat=True)[:MANY]:
        try:
            with _connection(queryset.db) as conn:
                call(conn, pk)
        except (TaskStateError, TaskNotFoundError, ScheduleNotFoundError):
            passed += 1
            continue
        changed += 1
    note = f" ({passed} could not be: they had moved on)" if passed else ""
    model_admin.message_user(request, f"{done} {changed}{note}.", messages.SUCCESS)


def _field_errors(form: forms.Form, call: Callable[[], object]) -> None:
    """``call()``; txqueue's refusal shown on the field it names."""
    try:
        call()
    except ValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        form.add_error(exc.field if exc.field in form.fields else None, message)
    except ConfigError as exc:  # the periodic extra missing
        form.add_error(None, str(exc))


class _ReadOnly(admin.ModelAdmin):
    """Rows to look at and act on: never added, edited by form or deleted here."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return self.fields or ()

    def get_actions(self, request: Any) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def change_view(
        self, request: Any, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        hidden = {"show_save": False, "show_save_and_continue": False}
        hidden |= {"show_save_and_add_another": False, "show_delete": False}
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), **hidden}
        )


# --- tasks ------------------------------------------------------------------------------


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in STATES]

    def queryset(self, request: Any, queryset: Any) -> Any:
        return queryset if self.value() is None else queryset.filter(state=self.value())


class _Recent(admin.SimpleListFilter):
    """The values of one column among the newest ``RECENT`` tasks."""

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        newest = model_admin.get_queryset(request).order_by("-id")[:RECENT]
        values = set(newest.values_list(self.parameter_name, flat=True))
        return [(v, v) for v in sorted(values)]

    def queryset(self, request: Any, queryset: Any) -> Any:
        value = self.value()
        return queryset if value is None else queryset.filter(**{self.parameter_name: value})


class QueueFilter(_Recent):
    title = "queue"
    parameter_name = "queue"


class NameFilter(_Recent):
    title = "task name"
    parameter_name = "name"


@admin.register(Task)
class TaskAdmin(_ReadOnly):
    list_display = ("id", "name", "queue", "state", "attempts", "created_at", "finished_at")
    list_filter = (StateFilter, QueueFilter, NameFilter)
    search_fields = ("name",)
    search_help_text = "A task's id, or its name."
    paginator = CappedPaginator
    show_full_result_count = False
    list_per_page = 50
    actions = ("retry_selected", "cancel_selected")
    fields = (
        "id",
        "name",
        "queue",
        "state",
        "priority",
        "attempts",
        "max_attempts",
        "run_at",
        "start_time",
        "finished_at",
        "created_at",
        "worker_id",
        "workflow",
        "step",
        "arguments",
        "outcome",
        "history",
        "failures",
    )

    def get_search_results(self, request: Any, queryset: Any, search_term: str) -> Any:
        """By id, else by name: exact, both on an index or a short scan."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            return queryset.filter(name=term), False

    @admin.action(
        permissions=["change"], description="Retry the selected tasks (failed or cancelled)"
    )
    def retry_selected(self, request: Any, queryset: Any) -> None:
        by = _by(request)
        _each(self, request, queryset, lambda c, pk: txqueue.retry(c, pk, by=by), "Retried")

    @admin.action(
        permissions=["change"],
        description="Cancel the selected tasks (running ones are asked to stop)",
    )
    def cancel_selected(self, request: Any, queryset: Any) -> None:
        by = _by(request)
        _each(self, request, queryset, lambda c, pk: txqueue.cancel(c, pk, by=by), "Cancelled")

    @admin.display(description="workflow")
    def workflow(self, obj: Task) -> Html:
        if obj.workflow_id is None:
            return "-"
        url = reverse("admin:txqueue_workflow_change", args=[obj.workflow_id])
        return format_html('<a href="{}">{}</a>', url, obj.workflow_id)

    @admin.display(description="payload")
    def arguments(self, obj: Task) -> Html:
        return _pretty(obj.payload)

    @admin.display(description="result")
    def outcome(self, obj: Task) -> Html:
        return _pretty(obj.result)

    @admin.display(description="history")
    def history(self, obj: Task) -> Html:
        """Each move of the task: claims, outcomes, retries, cancellations, and by whom."""
        with _connection(obj._state.db) as conn:
            events = txqueue.get_task(conn, obj.pk).events
        if not events:
            return "Not claimed yet."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} → {}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.at.isoformat(timespec="milliseconds"),
                    e.attempt,
                    e.move,
                    e.from_state,
                    e.to_state,
                    e.by or "-",
                    e.reason or "",
                )
                for e in events
            ),
        )
        head = (
            "<tr><th>at</th><th>attempt</th><th>what</th><th>state</th><th>by</th><th>why</th></tr>"
        )
        return format_html("<table>{}{}</table>", format_html(head), rows)

    @admin.display(description="errors")
    def failures(self, obj: Task) -> Html:
        if not obj.errors:
            return "-"
        return format_html_join(
            "",
            "<p>Attempt {} at {}: {}: {}</p><pre>{}</pre>",
            (
                (
                    e.get("attempt"),
                    e.get("at"),
                    e.get("type"),
                    e.get("message"),
                    e.get("traceback") or "",
                )
                for e in obj.errors
            ),
        )


def _pretty(value: Any) -> Html:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


# --- queues -----------------------------------------------------------------------------


class QueueForm(forms.ModelForm):
    queue = forms.CharField()
    rate = forms.CharField(
        required=False, help_text="Task starts per period: 50/s, 600/min, 5/10s. Empty: none."
    )
    concurrency = forms.IntegerField(
        required=False, min_value=1, help_text="Tasks running at once. Empty: no limit."
    )
    paused = forms.BooleanField(required=False)
    fair_share = forms.BooleanField(
        required=False, help_text="The keys of the queue's tasks take turns."
    )

    class Meta:
        model = Queue
        fields = ("queue",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        row = self.instance
        if row.rate_limit is not None and row.rate_period is not None:
            self.initial["rate"] = format_rate(row.rate_limit, row.rate_period)

    def clean(self) -> Any:
        data = super().clean()
        if data.get("queue"):
            _field_errors(self, lambda: check_queue(data["queue"]))
        if data.get("rate"):
            _field_errors(self, lambda: parse_rate(data["rate"], "rate"))
        if data.get("concurrency") is not None:
            _field_errors(self, lambda: check_concurrency(data["concurrency"]))
        return data


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    form = QueueForm
    list_display = ("queue", "paused", "rate", "concurrency", "fair_share", "updated_at")
    actions = ("pause", "resume")

    def get_fields(self, request: Any, obj: Any = None) -> Any:
        return ("queue", "paused", "rate", "concurrency", "fair_share")

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return ("queue",) if obj is not None else ()

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False  # a queue runs freely once its limits are emptied and it is resumed

    @admin.display(description="rate")
    def rate(self, obj: Queue) -> str:
        if obj.rate_limit is None or obj.rate_period is None:
            return "-"
        return format_rate(obj.rate_limit, obj.rate_period)

    def save_model(self, request: Any, obj: Queue, form: Any, change: bool) -> None:
        """The limits and the pause through txqueue: every worker obeys them from its next
        claim, and a resumed queue's workers are woken."""
        data, db = form.cleaned_data, obj._state.db or "default"
        with _connection(db) as conn:
            txqueue.limit_queue(
                conn,
                obj.queue,
                rate_limit=data["rate"] or None,
                concurrency=data["concurrency"],
                fair_share=data["fair_share"],
            )
            if data["paused"]:
                txqueue.pause_queue(conn, obj.queue)
            elif change and form.initial.get("paused"):
                txqueue.resume_queue(conn, obj.queue)

    @admin.action(permissions=["change"], description="Pause the selected queues")
    def pause(self, request: Any, queryset: Any) -> None:
        _each(self, request, queryset, txqueue.pause_queue, "Paused")

    @admin.action(permissions=["change"], description="Resume the selected queues")
    def resume(self, request: Any, queryset: Any) -> None:
        _each(self, request, queryset, txqueue.resume_queue, "Resumed")


# --- schedules --------------------------------------------------------------------------


class ScheduleForm(forms.ModelForm):
    name = forms.CharField()
    task = forms.CharField(help_text="The task enqueued at each slot, by its registered name.")
    queue = forms.CharField(initial="default")
    cron = forms.CharField(
        help_text="Five fields (minute hour day-of-month month day-of-week), or six with "
        "seconds first, read in the time zone."
    )
    timezone = forms.CharField(initial="UTC")
    payload = forms.JSONField(required=False, help_text="The task's arguments by name.")
    catch_up = forms.BooleanField(
        required=False, help_text="Enqueue each slot missed while no worker ran, not the last."
    )

    class Meta:
        model = Schedule
        fields = ("name",)

    def clean(self) -> Any:
        data = super().clean()
        # Changing, the name is shown, not a field: it is the schedule's.
        name = data.get("name", self.instance.name)
        fields = ("task", "queue", "cron", "timezone")
        if name and all(data.get(f) for f in fields):
            task, queue, cron, zone = (data[f] for f in fields)
            _field_errors(
                self,
                lambda: Cron(name, cron, task, queue, data.get("payload"), zone, data["catch_up"]),
            )
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "source",
        "task",
        "queue",
        "cron",
        "timezone",
        "paused",
        "last_slot",
        "next_run",
    )
    list_filter = ("source", "paused")
    actions = ("pause", "resume", "delete_selected")
    editable = ("task", "queue", "cron", "timezone", "payload", "catch_up")

    def get_fields(self, request: Any, obj: Any = None) -> Any:
        return ("name", *self.editable, "source", "paused", "last_slot", "next_run")

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        shown = ("source", "paused", "last_slot", "next_run")
        if obj is None:
            return shown
        if obj.source != timetable.RUNTIME:
            return ("name", *self.editable, *shown)
        return ("name", *shown)

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        # One declared in code is changed in the code: its page is to look at (the list's
        # actions still pause and resume it).
        if obj is not None and obj.source != timetable.RUNTIME:
            return False
        return bool(super().has_change_permission(request, obj))

    @admin.display(description="next run")
    def next_run(self, obj: Schedule) -> Any:
        if obj.pk is None or obj.paused:
            return "-"
        return Cron(obj.name, obj.cron, obj.task, obj.queue, None, obj.timezone).next_after(
            obj.last_slot
        )

    def save_model(self, request: Any, obj: Schedule, form: Any, change: bool) -> None:
        """Made or changed through txqueue: the workers keep it from their next look."""
        definition = {k: form.cleaned_data[k] for k in self.editable}
        with _connection(obj._state.db or "default") as conn:
            if change:
                timetable.change_schedule(conn, obj.name, **definition)
            else:
                timetable.create_schedule(conn, obj.name, **definition)

    def delete_model(self, request: Any, obj: Schedule) -> None:
        with _connection(obj._state.db or "default") as conn:
            timetable.delete_schedule(conn, obj.name)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    @admin.action(permissions=["change"], description="Pause the selected schedules")
    def pause(self, request: Any, queryset: Any) -> None:
        _each(self, request, queryset, timetable.pause_schedule, "Paused")

    @admin.action(
        permissions=["change"], description="Resume the selected schedules (from their next slot)"
    )
    def resume(self, request: Any, queryset: Any) -> None:
        _each(self, request, queryset, timetable.resume_schedule, "Resumed")


# --- workflows --------------------------------------------------------------------------


@admin.register(Workflow)
class WorkflowAdmin(_ReadOnly):
    list_display = ("name", "id", "steps", "created_at")
    search_fields = ("name",)
    paginator = CappedPaginator
    show_full_result_count = False
    actions = ("cancel_selected",)
    fields = ("id", "name", "created_at", "state", "step_list")

    @admin.display(description="state")
    def state(self, obj: Workflow) -> str:
        with _connection(obj._state.db) as conn:
            return str(txqueue.get_workflow(conn, obj.pk).state)

    @admin.display(description="steps")
    def step_list(self, obj: Workflow) -> Html:
        steps = Task.objects.using(obj._state.db).filter(workflow_id=obj.pk).order_by("id")
        return format_html(
            "<table><tr><th>step</th><th>task</th><th>state</th><th>attempts</th></tr>{}</table>",
            format_html_join(
                "",
                '<tr><td>{}</td><td><a href="{}">{}</a></td><td>{}</td><td>{}</td></tr>',
                (
                    (
                        s.step or "-",
                        reverse("admin:txqueue_task_change", args=[s.pk]),
                        s.name,
                        s.state,
                        s.attempts,
                    )
                    for s in steps[:MANY]
                ),
            ),
        )

    @admin.action(
        permissions=["change"], description="Cancel the selected workflows (their steps not ended)"
    )
    def cancel_selected(self, request: Any, queryset: Any) -> None:
        by = _by(request)
        _each(
            self,
            request,
            queryset,
            lambda c, pk: txqueue.cancel_workflow(c, pk, by=by),
            "Cancelled",
        )
