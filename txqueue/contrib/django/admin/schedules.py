"""Schedules of both kinds: make, change, pause, resume and delete those made at run
time; pause and resume those declared in code."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from ....app import DEFAULTS
from ....schedules import runtime as timetable
from ....schedules.info import next_run
from ....schedules.periodic import Schedule as Cron
from ..models import Schedule
from .common import each, field_errors, txqueue_connection


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
            field_errors(
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
        if obj.pk is None:
            return "-"
        return next_run(obj.cron, obj.timezone, obj.last_slot, obj.paused) or "-"

    def save_model(self, request: Any, obj: Schedule, form: Any, change: bool) -> None:
        """Made or changed through txqueue: the workers keep it from their next look."""
        definition = {k: form.cleaned_data[k] for k in self.editable}
        with txqueue_connection(obj._state.db or "default") as conn:
            if change:
                DEFAULTS.change_schedule(conn, obj.name, **definition)
            else:
                DEFAULTS.create_schedule(conn, obj.name, **definition)

    def delete_model(self, request: Any, obj: Schedule) -> None:
        with txqueue_connection(obj._state.db or "default") as conn:
            DEFAULTS.delete_schedule(conn, obj.name)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    @admin.action(permissions=["change"], description="Pause the selected schedules")
    def pause(self, request: Any, queryset: Any) -> None:
        each(self, request, queryset, DEFAULTS.pause_schedule, "Paused")

    @admin.action(
        permissions=["change"], description="Resume the selected schedules (from their next slot)"
    )
    def resume(self, request: Any, queryset: Any) -> None:
        each(self, request, queryset, DEFAULTS.resume_schedule, "Resumed")
