"""Tasks: filtered by state, queue and name, with their history; retry and cancel."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

import txqueue

from ....core.task import STATES
from ..models import Task
from .common import (
    RECENT,
    CappedPaginator,
    Html,
    ReadOnly,
    by_user,
    each,
    pretty,
    txqueue_connection,
)


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
class TaskAdmin(ReadOnly):
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
        permissions=["change"],
        description="Retry the selected tasks: those that failed or were cancelled run again",
    )
    def retry_selected(self, request: Any, queryset: Any) -> None:
        by = by_user(request)
        each(self, request, queryset, lambda c, pk: txqueue.retry(c, pk, by=by), "Retried")

    @admin.action(
        permissions=["change"],
        description="Cancel the selected tasks (running ones are asked to stop)",
    )
    def cancel_selected(self, request: Any, queryset: Any) -> None:
        by = by_user(request)
        each(self, request, queryset, lambda c, pk: txqueue.cancel(c, pk, by=by), "Cancelled")

    @admin.display(description="workflow")
    def workflow(self, obj: Task) -> Html:
        if obj.workflow_id is None:
            return "-"
        url = reverse("admin:txqueue_workflow_change", args=[obj.workflow_id])
        return format_html('<a href="{}">{}</a>', url, obj.workflow_id)

    @admin.display(description="payload")
    def arguments(self, obj: Task) -> Html:
        return pretty(obj.payload)

    @admin.display(description="result")
    def outcome(self, obj: Task) -> Html:
        return pretty(obj.result)

    @admin.display(description="history")
    def history(self, obj: Task) -> Html:
        """Each move of the task: claims, outcomes, retries, cancellations, and by whom."""
        with txqueue_connection(obj._state.db) as conn:
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
