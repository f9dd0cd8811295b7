"""The dashboard's pages: what each shows, read through the store's bounded queries; and
how a page or an action (``actions``) becomes an endpoint, txqueue's errors pages with
their status and every POST checked to come from a page of this dashboard."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Generic
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .. import config, redaction
from ..app import DEFAULTS, Calls
from ..core.fields import check_queue
from ..core.stored import TaskInfo
from ..core.task import CANCELLED, FAILED, PARKED, PENDING, RUNNING, STATES, WAITING
from ..errors import (
    ConfigError,
    ScheduleNotFoundError,
    StoreError,
    TaskNotFoundError,
    TaskStateError,
    TxQueueError,
)
from ..observability.horizon import Watch
from ..operations import manage, search
from ..operations.filters import TaskFilter
from ..store.protocols import Own
from ..store.roles import Browsing
from .shown import age, at, capped, chart, fields, number, pretty, queue_rows

COUNT_CAP = 10_000  # tasks counted per state: beyond it the overview shows "10,000+"
RATE_CAP = 100_000  # finished tasks of each state read for the chart
WINDOW = 20_000  # tasks a task-list page looks through for its matches
PAGE = 50
REFRESH = 5  # seconds between the overview's reloads
CSRF_COOKIE = "txqueue_csrf"
DONE = {
    "retried": "Retried: the task is pending again.",
    "cancelled": "Cancelled: the task will not run.",
    "cancel_requested": "Cancellation requested: the handler sees ctx.cancelled.",
    "retried_failed": "Retried {n} failed tasks.",
    "paused": "Paused: none of the queue's tasks starts until it is resumed.",
    "resumed": "Resumed: workers are woken for the queue's tasks.",
    "limited": "Limits saved: every worker obeys them from its next claim.",
    "workflow_cancelled": "Cancelled: the steps not ended will not run.",
    "bulk_retried": "Retried {n} tasks: they are pending again.",
    "bulk_cancelled": "Cancelled {n} tasks (running ones are asked to stop).",
    "group_retried": "Retried the group's {n} tasks: they are pending again.",
    "group_discarded": "Discarded the group's {n} tasks.",
    "schedule_created": "Schedule created: the workers of its queue keep it from their next "
    "look, within a second.",
    "schedule_changed": "Schedule changed: the workers keep the new one from their next look.",
    "schedule_paused": "Paused: the schedule enqueues nothing until it is resumed.",
    "schedule_resumed": "Resumed: the schedule enqueues from its next slot on.",
    "schedule_deleted": "Deleted. A schedule still declared in code comes back at a worker's "
    "next look: pause it instead.",
}


def same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def _done(request: Request) -> str | None:
    """The notice of the action just done: fixed text, never words from the address."""
    text = DONE.get(request.query_params.get("done", ""))
    n = request.query_params.get("n", "0")
    return None if text is None else text.format(n=int(n) if n.isdigit() else 0)


class Pages(Generic[Own]):
    """The pages of one database: ``database``, of several named ``databases``, each
    served under ``/db/<name>``; None, the only one. ``calls`` acts on it."""

    def __init__(
        self,
        store: Browsing[Own],
        database_url: str,
        read_only: bool,
        database: str | None = None,
        databases: Sequence[str] = (),
        calls: Calls = DEFAULTS,
    ) -> None:
        self.url = database_url
        self.store = store
        self.read_only = read_only
        self.database, self.databases = database, list(databases)
        # Of several databases, an App's: the wake-ups of what the pages retry go to the
        # queues of the database they were retried in, and no other caller's are changed.
        self.calls = calls
        # Its own readings, for the ages of what the database keeps no time for; the
        # warning in the logs is the workers' and the cleaner's to give.
        self.horizon = Watch(config.vacuum_horizon_warn(), logger=None)
        folder = resources.files("txqueue.dashboard") / "templates"
        self.env = Environment(
            loader=FileSystemLoader(str(folder)),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(age=age, at=at, number=number, pretty=pretty)

    @contextmanager
    def connect(self) -> Iterator[Own]:
        conn = self.store.connect(self.url, application_name="txqueue-dashboard")
        try:
            yield conn
        finally:
            conn.close()

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        csrf = request.cookies.get(CSRF_COOKIE) or request.scope.get("state", {}).get("csrf")
        root = self.root(request)
        top = root.removesuffix(f"/db/{self.database}") if self.database else root
        values = {
            "root": root,
            "top": top,
            "path": request.url.path.removeprefix(root) or "/",
            "database": self.database,
            "databases": self.databases,
            "read_only": self.read_only,
            "csrf": csrf,
            "done": _done(request),
        }
        body = self.env.get_template(template).render({**values, **context})
        return HTMLResponse(body, status_code=status)

    @staticmethod
    def root(request: Request) -> str:
        """Where this database's pages are served: their links and redirects start there."""
        return str(request.scope.get("root_path", "")).rstrip("/")

    def to(self, request: Request, path: str) -> RedirectResponse:
        """See ``path`` of this database's pages."""
        return RedirectResponse(self.root(request) + path, status_code=303)

    def _error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "message.html", status, message=message)

    def _guarded(self, request: Request, page: Callable[[], Response]) -> Response:
        try:
            return page()
        except (TaskNotFoundError, ScheduleNotFoundError) as exc:
            return self._error(request, 404, str(exc))
        except TaskStateError as exc:
            return self._error(request, 409, str(exc))
        except StoreError as exc:
            return self._error(request, 503, redaction.scrub(str(exc), self.url))
        except TxQueueError as exc:  # a bad filter or id: named in the message
            return self._error(request, 400, str(exc))

    # --- pages --------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        with self.connect() as conn:
            counts = self.store.queue_counts(conn, COUNT_CAP)
            rates = self.store.finished_per_minute(conn, RATE_CAP)
            failing = self.store.failing_names(conn, COUNT_CAP, 5)
            horizon = self.horizon.read(self.store, conn)
            flow = {q.queue: q for q in self.store.queue_settings(conn)}
        past = horizon is not None and horizon.past(self.horizon.threshold)
        return self.render(
            request,
            "overview.html",
            queues=queue_rows(counts, flow),
            capped=capped(counts, COUNT_CAP),
            chart=chart(rates, RATE_CAP),
            failing=failing,
            horizon=horizon if past else None,
            refresh=REFRESH,
            states=STATES,
        )

    def tasks(self, request: Request) -> Response:
        q = request.query_params
        found = q.get("id", "").strip()
        if found:
            return self.to(request, f"/tasks/{manage.task_id_of(found)}")
        state, queue, name = (q.get(k) or None for k in ("state", "queue", "name"))
        if state is not None and state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        if queue is not None:
            check_queue(queue)
        before = q.get("before")
        filters = {k: v for k, v in (("state", state), ("queue", queue), ("name", name)) if v}
        with self.connect() as conn:
            result = self.store.browse(
                conn,
                state=state,
                queue=queue,
                name=name,
                before=None if before is None else manage.task_id_of(before),
                window=WINDOW,
                limit=PAGE,
            )
            # Counted for a state only, the one the page's actions take, and up to the cap.
            where = TaskFilter(state=state, queue=queue, name=name)
            matching = self.calls.count_tasks(conn, where, cap=COUNT_CAP) if state else None
        older = None
        if result.older is not None:
            more = urlencode({**filters, "before": str(result.older)})
            older = f"{self.root(request)}/tasks?{more}"
        return self.render(
            request,
            "tasks.html",
            tasks=result.tasks,
            short=len(result.tasks) < PAGE and result.older is not None,
            older=older,
            first=before is None,
            filters=filters,
            states=STATES,
            window=WINDOW,
            matching=matching,
            capped=matching is not None and matching >= COUNT_CAP,
            can_retry=state in (None, FAILED, CANCELLED),
            can_cancel=state in (None, PENDING, RUNNING, WAITING, PARKED),
        )

    def task(self, request: Request) -> Response:
        with self.connect() as conn:
            info = self.calls.get_task(conn, request.path_params["task_id"])
        return self.render(
            request,
            "task.html",
            task=info,
            fields=fields(info),
            can_retry=info.state in (FAILED, CANCELLED),
            can_cancel=info.state in (PENDING, RUNNING, PARKED) and not info.cancel_requested,
        )

    def workflow(self, request: Request) -> Response:
        with self.connect() as conn:
            info = self.calls.get_workflow(conn, request.path_params["workflow_id"])
        names = {s.id: s.step for s in info.steps}
        return self.render(
            request,
            "workflow.html",
            workflow=info,
            after={s.id: ", ".join(names.get(p, str(p)) for p in s.parents) for s in info.steps},
            can_cancel=info.state == "running",
        )

    def dead_letters(self, request: Request) -> Response:
        with self.connect() as conn:
            groups = self.calls.dead_letters(conn, limit=search.SEARCH_LIMIT)
        return self.render(request, "dead_letters.html", groups=groups)

    def workers(self, request: Request) -> Response:
        with self.connect() as conn:
            workers = self.store.workers(conn)
            running = self.store.running_tasks(conn, 1000)
        by_worker: dict[str | None, list[TaskInfo]] = {}
        for t in running:
            by_worker.setdefault(t.worker_id, []).append(t)
        known = {w.worker_id for w in workers}
        return self.render(
            request,
            "workers.html",
            workers=workers,
            running=by_worker,
            unknown=sorted((w or "-") for w in by_worker if w not in known),
            now=datetime.now(UTC),
        )

    # --- as endpoints -------------------------------------------------------------------

    def page(self, view: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """``view`` as an endpoint (run on Starlette's threads): txqueue's errors become
        pages with their status."""
        return lambda request: self._guarded(request, lambda: view(request))

    def action(
        self, act: Callable[[Request, FormData], Response]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``act`` as a POST endpoint, run only for a form of this dashboard's own pages:
        the browser says it comes from this origin (another port of the same host is
        another origin, though it shares the cookies), and it carries the token of the
        page it was on."""

        async def endpoint(request: Request) -> Response:
            origin = f"{request.url.scheme}://{request.headers.get('host', '')}"
            form = await request.form()
            given, cookie = form.get("csrf"), request.cookies.get(CSRF_COOKIE)
            if request.headers.get("origin") != origin or not (
                isinstance(given, str) and cookie and same(given, cookie)
            ):
                return self._error(request, 403, "the form's CSRF token is missing or stale")
            return await run_in_threadpool(self._guarded, request, lambda: act(request, form))

        return endpoint


def field(form: FormData, name: str, *, required: bool = True) -> str:
    value = form.get(name)
    if not isinstance(value, str) or (required and not value.strip()):
        if required:
            raise ConfigError(f"{name}: missing")
        return ""
    return value.strip()
