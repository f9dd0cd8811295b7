"""The dashboard's Schedules page and its actions: the schedules of both kinds, a form to
make or change one made at run time, and pause, resume and delete, through
``txqueue.schedules.runtime`` as the CLI's commands do."""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from ..errors import ConfigError
from .pages import Pages, field

ACTIONS = {"pause": "schedule_paused", "resume": "schedule_resumed", "delete": "schedule_deleted"}


class SchedulePages:
    def __init__(self, pages: Pages[Any]) -> None:
        self.pages = pages

    def schedules(self, request: Request) -> Response:
        """The list; with ``?edit=NAME``, the form filled in to change that one."""
        with self.pages.connect() as conn:
            kept = self.pages.calls.list_schedules(conn)
        editing = request.query_params.get("edit")
        form = next((s for s in kept if s.name == editing and s.source == "runtime"), None)
        return self.pages.render(
            request,
            "schedules.html",
            schedules=kept,
            form=form,
            payload="" if form is None or form.payload is None else json.dumps(form.payload),
        )

    def create(self, request: Request, form: FormData) -> Response:
        with self.pages.connect() as conn:
            self.pages.calls.create_schedule(conn, field(form, "name"), **_definition(form))
        return self.pages.to(request, "/schedules?done=schedule_created")

    def change(self, request: Request, form: FormData) -> Response:
        with self.pages.connect() as conn:
            self.pages.calls.change_schedule(conn, field(form, "name"), **_definition(form))
        return self.pages.to(request, "/schedules?done=schedule_changed")

    def act(self, request: Request, form: FormData) -> Response:
        """Pause, resume or delete the schedule the form names."""
        action = request.path_params["action"]
        if action not in ACTIONS:
            raise ConfigError(f"action: must be pause, resume or delete, got {action!r}")
        name = field(form, "name")
        with self.pages.connect() as conn:
            if action == "pause":
                self.pages.calls.pause_schedule(conn, name)
            elif action == "resume":
                self.pages.calls.resume_schedule(conn, name)
            else:
                self.pages.calls.delete_schedule(conn, name)
        return self.pages.to(request, f"/schedules?done={ACTIONS[action]}")


def _definition(form: FormData) -> dict[str, Any]:
    """The form's fields as the calls take them: every one given (an empty payload is
    none), so that a change sets the whole definition shown."""
    text = field(form, "payload", required=False)
    try:
        payload = json.loads(text) if text else None
    except ValueError as exc:
        raise ConfigError(f"payload: not valid JSON: {exc}") from None
    return {
        "cron": field(form, "cron"),
        "task": field(form, "task"),
        "queue": field(form, "queue"),
        "payload": payload,
        "timezone": field(form, "timezone"),
        "catch_up": field(form, "catch_up", required=False) == "on",
    }
