"""Workflows: their steps, with links to their tasks; cancel."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

import txqueue

from ..models import Task, Workflow
from .common import MANY, CappedPaginator, Html, ReadOnly, by_user, each, txqueue_connection


@admin.register(Workflow)
class WorkflowAdmin(ReadOnly):
    list_display = ("name", "id", "steps", "created_at")
    search_fields = ("name",)
    paginator = CappedPaginator
    show_full_result_count = False
    actions = ("cancel_selected",)
    fields = ("id", "name", "created_at", "state", "step_list")

    @admin.display(description="state")
    def state(self, obj: Workflow) -> str:
        with txqueue_connection(obj._state.db) as conn:
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
        permissions=["change"],
        description="Cancel the selected workflows: their steps not ended yet are cancelled",
    )
    def cancel_selected(self, request: Any, queryset: Any) -> None:
        by = by_user(request)
        each(
            self,
            request,
            queryset,
            lambda c, pk: txqueue.cancel_workflow(c, pk, by=by),
            "Cancelled",
        )
