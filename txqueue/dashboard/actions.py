"""The dashboard's actions on tasks, workflows, dead letters and queues: each a POST
from one of its own pages (``Pages.action`` checks that), done through txqueue's own
functions as the CLI's are, then a redirect to the page with a notice of what was done."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from .. import broker
from ..core.fields import check_queue
from ..core.task import CANCELLED, FAILED
from ..errors import ConfigError, TaskNotFoundError, TaskStateError
from ..operations.filters import TaskFilter
from .pages import PAGE, Pages, field

BULK = {"retry": "bulk_retried", "cancel": "bulk_cancelled"}
_FILTERS = ("state", "queue", "name")


class Actions:
    def __init__(self, pages: Pages[Any]) -> None:
        self.pages = pages

    def retry(self, request: Request, form: FormData) -> Response:
        task_id = request.path_params["task_id"]
        with self.pages.connect() as conn:
            self.pages.calls.retry(conn, task_id, by="dashboard")
        broker.flush(timeout=3.0)
        return self.pages.to(request, f"/tasks/{task_id}?done=retried")

    def cancel(self, request: Request, form: FormData) -> Response:
        task_id = request.path_params["task_id"]
        with self.pages.connect() as conn:
            state = self.pages.calls.cancel(conn, task_id, by="dashboard")
        done = "cancelled" if state == CANCELLED else "cancel_requested"
        return self.pages.to(request, f"/tasks/{task_id}?done={done}")

    def cancel_workflow(self, request: Request, form: FormData) -> Response:
        workflow_id = request.path_params["workflow_id"]
        with self.pages.connect() as conn:
            self.pages.calls.cancel_workflow(conn, workflow_id, by="dashboard")
        return self.pages.to(request, f"/workflows/{workflow_id}?done=workflow_cancelled")

    def bulk_tasks(self, request: Request, form: FormData) -> Response:
        """The tasks ticked on a page of the task list, or, with ``all``, every task the
        page's filters match, retried or cancelled."""
        action, every = field(form, "action"), field(form, "all", required=False) == "on"
        if action not in BULK:
            raise ConfigError(f"action: must be retry or cancel, got {action!r}")
        state, queue, name = (field(form, k, required=False) or None for k in _FILTERS)
        kept = {k: v for k, v in zip(_FILTERS, (state, queue, name), strict=True) if v}
        if every:
            if state is None:
                raise ConfigError("all matching: choose a state first")
            where = TaskFilter(state=state, queue=queue, name=name)
            run = (
                self.pages.calls.retry_tasks if action == "retry" else self.pages.calls.cancel_tasks
            )
            count = run(where, by="dashboard", database_url=self.pages.url)
        else:
            ids = [i for i in form.getlist("id") if isinstance(i, str)]
            if not ids:
                raise ConfigError("no task ticked: tick some, or choose all matching")
            count = 0
            with self.pages.connect() as conn:
                for task_id in ids[:PAGE]:
                    try:
                        if action == "retry":
                            self.pages.calls.retry(conn, task_id, by="dashboard")
                        else:
                            self.pages.calls.cancel(conn, task_id, by="dashboard")
                    except (TaskStateError, TaskNotFoundError):
                        continue  # moved on, or pruned, since the page was shown
                    count += 1
        broker.flush(timeout=3.0)
        query = urlencode({**kept, "done": BULK[action], "n": count})
        return self.pages.to(request, f"/tasks?{query}")

    def dead_letter_group(self, request: Request, form: FormData) -> Response:
        """A dead-letter group's tasks, retried or discarded."""
        action = request.path_params["action"]
        if action not in ("retry", "discard"):
            raise ConfigError(f"action: must be retry or discard, got {action!r}")
        name, error = field(form, "name"), field(form, "error")
        where = TaskFilter(name=name, state=FAILED, failed_with=error)
        if action == "retry":
            count, done = (
                self.pages.calls.retry_tasks(where, by="dashboard", database_url=self.pages.url),
                "group_retried",
            )
        else:
            count, done = (
                self.pages.calls.delete_tasks(where, by="dashboard", database_url=self.pages.url),
                "group_discarded",
            )
        broker.flush(timeout=3.0)
        return self.pages.to(request, f"/dead-letters?done={done}&n={count}")

    def retry_failed(self, request: Request, form: FormData) -> Response:
        queue = field(form, "queue")
        check_queue(queue)
        with self.pages.connect() as conn:
            count = self.pages.calls.retry_failed(conn, queue=queue, by="dashboard")
        broker.flush(timeout=3.0)
        return self.pages.to(request, f"/?done=retried_failed&n={count}")

    def pause_queue(self, request: Request, form: FormData) -> Response:
        queue = field(form, "queue")
        with self.pages.connect() as conn:
            self.pages.calls.pause_queue(conn, queue)
        return self.pages.to(request, "/?done=paused")

    def resume_queue(self, request: Request, form: FormData) -> Response:
        queue = field(form, "queue")
        with self.pages.connect() as conn:
            self.pages.calls.resume_queue(conn, queue)
        broker.flush(timeout=3.0)
        return self.pages.to(request, "/?done=resumed")

    def limit_queue(self, request: Request, form: FormData) -> Response:
        """The limits as the form gives them: an empty field removes its limit, an unticked
        box fair share."""
        queue = field(form, "queue")
        rate = field(form, "rate_limit", required=False) or None
        concurrency = field(form, "concurrency", required=False) or None
        if concurrency is not None and not concurrency.isdigit():
            raise ConfigError(f"concurrency: {concurrency!r} is not a whole number")
        with self.pages.connect() as conn:
            self.pages.calls.limit_queue(
                conn,
                queue,
                rate_limit=rate,
                concurrency=None if concurrency is None else int(concurrency),
                fair_share=field(form, "fair_share", required=False) == "on",
            )
        return self.pages.to(request, "/?done=limited")
