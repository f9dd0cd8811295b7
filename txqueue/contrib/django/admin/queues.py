"""Queues: pause, resume, and the rate, concurrency and fair share set through
``limit_queue``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

import txqueue

from ....core.fields import check_queue
from ....core.limits import check_concurrency, format_rate, parse_rate
from ..models import Queue
from .common import each, field_errors, txqueue_connection


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
            field_errors(self, lambda: check_queue(data["queue"]))
        if data.get("rate"):
            field_errors(self, lambda: parse_rate(data["rate"], "rate"))
        if data.get("concurrency") is not None:
            field_errors(self, lambda: check_concurrency(data["concurrency"]))
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
        with txqueue_connection(db) as conn:
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
        each(self, request, queryset, txqueue.pause_queue, "Paused")

    @admin.action(permissions=["change"], description="Resume the selected queues")
    def resume(self, request: Any, queryset: Any) -> None:
        each(self, request, queryset, txqueue.resume_queue, "Resumed")
