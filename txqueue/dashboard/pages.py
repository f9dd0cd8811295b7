"""The dashboard's pages and actions: what each shows, read through the store's bounded
queries, and each action through ``txqueue.manage``, as the CLI's do."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterator
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

from .. import broker, bulk, config, flows, manage, queues
from ..errors import (
    ConfigError,
    ScheduleNotFoundError,
    StoreError,
    TaskNotFoundError,
    TaskStateError,
    TxQueueError,
)
from ..filters import TaskFilter
from ..horizon import Watch
from ..store.protocols import Browsing, Own
from ..store.records import QueueSettings
from ..task import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    STATES,
    SUCCEEDED,
    WAITING,
    TaskInfo,
    check_queue,
)

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
BULK = {"retry": "bulk_retried", "cancel": "bulk_cancelled"}
_FILTERS = ("state", "queue", "name")


def same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def _done(request: Request) -> str | None:
    """The notice of the action just done: fixed text, never words from the address."""
    text = DONE.get(request.query_params.get("done", ""))
    n = request.query_params.get("n", "0")
    return None if text is None else text.format(n=int(n) if n.isdigit() else 0)


class Pages(Generic[Own]):
    def __init__(self, store: Browsing[Own], database_url: str, read_only: bool) -> None:
        self.url = database_url
        self.store = store
        self.read_only = read_only
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
        self.env.filters.update(age=_age, at=_at, number=_number, pretty=_pretty)

    @contextmanager
    def _conn(self) -> Iterator[Own]:
        conn = self.store.connect(self.url, application_name="txqueue-dashboard")
        try:
            yield conn
        finally:
            conn.close()

    def _render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        csrf = request.cookies.get(CSRF_COOKIE) or request.scope.get("state", {}).get("csrf")
        body = self.env.get_template(template).render(
            path=request.url.path,
            read_only=self.read_only,
            csrf=csrf,
            done=_done(request),
            **context,
        )
        return HTMLResponse(body, status_code=status)

    def _error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self._render(request, "message.html", status, message=message)

    def _guarded(self, request: Request, page: Callable[[], Response]) -> Response:
        try:
            return page()
        except (TaskNotFoundError, ScheduleNotFoundError) as exc:
            return self._error(request, 404, str(exc))
        except TaskStateError as exc:
            return self._error(request, 409, str(exc))
        except StoreError as exc:
            return self._error(request, 503, config.scrub(str(exc), self.url))
        except TxQueueError as exc:  # a bad filter or id: named in the message
            return self._error(request, 400, str(exc))

    # --- pages --------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        with self._conn() as conn:
            counts = self.store.queue_counts(conn, COUNT_CAP)
            rates = self.store.finished_per_minute(conn, RATE_CAP)
            failing = self.store.failing_names(conn, COUNT_CAP, 5)
            horizon = self.horizon.read(self.store, conn)
            flow = {q.queue: q for q in self.store.queue_settings(conn)}
        past = horizon is not None and horizon.past(self.horizon.threshold)
        return self._render(
            request,
            "overview.html",
            queues=_queues(counts, flow),
            capped=_capped(counts),
            chart=_chart(rates),
            failing=failing,
            horizon=horizon if past else None,
            refresh=REFRESH,
            states=STATES,
        )

    def tasks(self, request: Request) -> Response:
        q = request.query_params
        found = q.get("id", "").strip()
        if found:
            return RedirectResponse(f"/tasks/{manage.task_id_of(found)}", status_code=303)
        state, queue, name = (q.get(k) or None for k in ("state", "queue", "name"))
        if state is not None and state not in STATES:
            raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        if queue is not None:
            check_queue(queue)
        before = q.get("before")
        filters = {k: v for k, v in (("state", state), ("queue", queue), ("name", name)) if v}
        with self._conn() as conn:
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
            matching = bulk.count_tasks(conn, where, cap=COUNT_CAP) if state else None
        older = None
        if result.older is not None:
            older = "/tasks?" + urlencode({**filters, "before": str(result.older)})
        return self._render(
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
            can_cancel=state in (None, PENDING, RUNNING, WAITING),
        )

    def task(self, request: Request) -> Response:
        with self._conn() as conn:
            info = manage.get_task(conn, request.path_params["task_id"])
        return self._render(
            request,
            "task.html",
            task=info,
            fields=_fields(info),
            can_retry=info.state in (FAILED, CANCELLED),
            can_cancel=info.state in (PENDING, RUNNING) and not info.cancel_requested,
        )

    def workflow(self, request: Request) -> Response:
        with self._conn() as conn:
            info = flows.get_workflow(conn, request.path_params["workflow_id"])
        names = {s.id: s.step for s in info.steps}
        return self._render(
            request,
            "workflow.html",
            workflow=info,
            after={s.id: ", ".join(names.get(p, str(p)) for p in s.parents) for s in info.steps},
            can_cancel=info.state == "running",
        )

    def dead_letters(self, request: Request) -> Response:
        with self._conn() as conn:
            groups = bulk.dead_letters(conn, limit=bulk.SEARCH_LIMIT)
        return self._render(request, "dead_letters.html", groups=groups)

    def workers(self, request: Request) -> Response:
        with self._conn() as conn:
            workers = self.store.workers(conn)
            running = self.store.running_tasks(conn, 1000)
        by_worker: dict[str | None, list[TaskInfo]] = {}
        for t in running:
            by_worker.setdefault(t.worker_id, []).append(t)
        known = {w.worker_id for w in workers}
        return self._render(
            request,
            "workers.html",
            workers=workers,
            running=by_worker,
            unknown=sorted((w or "-") for w in by_worker if w not in known),
            now=datetime.now(UTC),
        )

    # --- actions ------------------------------------------------------------------------

    def retry(self, request: Request, form: FormData) -> Response:
        task_id = request.path_params["task_id"]
        with self._conn() as conn:
            manage.retry(conn, task_id, by="dashboard")
        broker.flush(timeout=3.0)
        return RedirectResponse(f"/tasks/{task_id}?done=retried", status_code=303)

    def cancel(self, request: Request, form: FormData) -> Response:
        task_id = request.path_params["task_id"]
        with self._conn() as conn:
            state = manage.cancel(conn, task_id, by="dashboard")
        done = "cancelled" if state == CANCELLED else "cancel_requested"
        return RedirectResponse(f"/tasks/{task_id}?done={done}", status_code=303)

    def cancel_workflow(self, request: Request, form: FormData) -> Response:
        workflow_id = request.path_params["workflow_id"]
        with self._conn() as conn:
            flows.cancel_workflow(conn, workflow_id, by="dashboard")
        return RedirectResponse(
            f"/workflows/{workflow_id}?done=workflow_cancelled", status_code=303
        )

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
            run = bulk.retry_tasks if action == "retry" else bulk.cancel_tasks
            count = run(where, by="dashboard", database_url=self.url)
        else:
            ids = [i for i in form.getlist("id") if isinstance(i, str)]
            if not ids:
                raise ConfigError("no task ticked: tick some, or choose all matching")
            count = 0
            with self._conn() as conn:
                for task_id in ids[:PAGE]:
                    try:
                        if action == "retry":
                            manage.retry(conn, task_id, by="dashboard")
                        else:
                            manage.cancel(conn, task_id, by="dashboard")
                    except (TaskStateError, TaskNotFoundError):
                        continue  # moved on, or pruned, since the page was shown
                    count += 1
        broker.flush(timeout=3.0)
        query = urlencode({**kept, "done": BULK[action], "n": count})
        return RedirectResponse(f"/tasks?{query}", status_code=303)

    def dead_letter_group(self, request: Request, form: FormData) -> Response:
        """A dead-letter group's tasks, retried or discarded."""
        action = request.path_params["action"]
        if action not in ("retry", "discard"):
            raise ConfigError(f"action: must be retry or discard, got {action!r}")
        name, error = field(form, "name"), field(form, "error")
        where = TaskFilter(name=name, state=FAILED, failed_with=error)
        if action == "retry":
            count, done = (
                bulk.retry_tasks(where, by="dashboard", database_url=self.url),
                "group_retried",
            )
        else:
            count, done = (
                bulk.delete_tasks(where, by="dashboard", database_url=self.url),
                "group_discarded",
            )
        broker.flush(timeout=3.0)
        return RedirectResponse(f"/dead-letters?done={done}&n={count}", status_code=303)

    def retry_failed(self, request: Request, form: FormData) -> Response:
        queue = field(form, "queue")
        check_queue(queue)
        with self._conn() as conn:
            count = manage.retry_failed(conn, queue=queue, by="dashboard")
        broker.flush(timeout=3.0)
        return RedirectResponse(f"/?done=retried_failed&n={count}", status_code=303)

    def pause_queue(self, request: Request, form: FormData) -> Response:
        queue = field(form, "queue")
        with self._conn() as conn:
            queues.pause_queue(conn, queue)
        return RedirectResponse("/?done=paused", status_code=303)

    def resume_queue(self, request: Request, form: FormData) -> Response:
        queue = field(form, "queue")
        with self._conn() as conn:
            queues.resume_queue(conn, queue)
        broker.flush(timeout=3.0)
        return RedirectResponse("/?done=resumed", status_code=303)

    def limit_queue(self, request: Request, form: FormData) -> Response:
        """The limits as the form gives them: an empty field removes its limit, an unticked
        box fair share."""
        queue = field(form, "queue")
        rate = field(form, "rate_limit", required=False) or None
        concurrency = field(form, "concurrency", required=False) or None
        if concurrency is not None and not concurrency.isdigit():
            raise ConfigError(f"concurrency: {concurrency!r} is not a whole number")
        with self._conn() as conn:
            queues.limit_queue(
                conn,
                queue,
                rate_limit=rate,
                concurrency=None if concurrency is None else int(concurrency),
                fair_share=field(form, "fair_share", required=False) == "on",
            )
        return RedirectResponse("/?done=limited", status_code=303)

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


# --- what the templates show -------------------------------------------------------------


def _queues(counts: list[Any], flow: dict[str, QueueSettings]) -> list[dict[str, Any]]:
    queues: dict[str, dict[str, Any]] = {}
    for queue in flow:
        queues[queue] = {"name": queue, "ripe": 0, "oldest": None}
    for queue, state, n, ripe, oldest in counts:
        row = queues.setdefault(queue, {"name": queue, "ripe": 0, "oldest": None})
        row[state] = n
        if state == PENDING:
            row["ripe"], row["oldest"] = ripe, oldest
    for name, row in queues.items():
        row["flow"] = flow.get(name, QueueSettings(name))
    return [queues[name] for name in sorted(queues)]


def field(form: FormData, name: str, *, required: bool = True) -> str:
    value = form.get(name)
    if not isinstance(value, str) or (required and not value.strip()):
        if required:
            raise ConfigError(f"{name}: missing")
        return ""
    return value.strip()


def _capped(counts: list[Any]) -> set[str]:
    """The states whose count reached the cap: their numbers are lower bounds."""
    totals: dict[str, int] = {}
    for _, state, n, _, _ in counts:
        totals[state] = totals.get(state, 0) + n
    return {state for state, n in totals.items() if n >= COUNT_CAP}


def _chart(rates: list[Any]) -> dict[str, Any]:
    """Bars for the last 60 minutes, oldest first, scaled to the busiest minute."""
    per = {(state, ago): n for state, ago, n in rates if 0 <= ago < 60}
    minutes = [
        {"ago": ago, SUCCEEDED: per.get((SUCCEEDED, ago), 0), FAILED: per.get((FAILED, ago), 0)}
        for ago in range(59, -1, -1)
    ]
    top = max((m[SUCCEEDED] + m[FAILED] for m in minutes), default=0)
    for i, m in enumerate(minutes):
        scale = 100 / top if top else 0
        m["x"] = i * 10
        m["ok_h"] = round(m[SUCCEEDED] * scale, 1)
        m["fail_h"] = round(m[FAILED] * scale, 1)
    each = {state: sum(n for s, _, n in rates if s == state) for state in (SUCCEEDED, FAILED)}
    capped = any(n >= RATE_CAP for n in each.values())
    return {"minutes": minutes, "top": top, "total": sum(each.values()), "capped": capped}


def _fields(info: TaskInfo) -> list[tuple[str, Any]]:
    doc = info.as_dict()
    skip = {"payload", "result", "errors", "events", "id", "progress", "workflow_id"}
    return [(k, "-" if v is None else v) for k, v in doc.items() if k not in skip]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m"


def _at(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _number(n: int | None, capped: bool = False) -> str:
    return f"{n or 0:,}{'+' if capped and n else ''}"


SHOWN = 10_000
"""Characters of a payload or result a task's page shows; `txqueue show --full` has all."""


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) <= SHOWN:
        return text
    left = len(text) - SHOWN
    return f"{text[:SHOWN]}\n… {left:,} more characters (txqueue show --full prints it whole)"
