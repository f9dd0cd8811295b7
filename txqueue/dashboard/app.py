"""The dashboard's web app: server-rendered pages on Starlette and Jinja2, no script.

Reads go through the store's bounded queries; actions through ``txqueue.manage``, as the
CLI's do. Every action is a POST carrying the CSRF token of its page (double submit: the
form's field must equal the cookie, which another site can neither read nor set).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from .. import broker, client, config, manage
from ..errors import ConfigError, StoreError, TaskNotFoundError, TaskStateError, TxQueueError
from ..store import for_url
from ..store.base import Store
from ..task import CANCELLED, FAILED, PENDING, RUNNING, STATES, SUCCEEDED, TaskInfo, check_queue

MISSING = "the dashboard needs its extra: pip install 'txqueue[dashboard]'"

try:
    import uvicorn
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles
    from starlette.types import ASGIApp, Receive, Scope, Send
except ImportError:
    raise ConfigError(MISSING) from None

COUNT_CAP = 10_000  # tasks counted per state: beyond it the overview shows "10,000+"
RATE_CAP = 100_000  # finished tasks of each state read for the chart
WINDOW = 20_000  # tasks a task-list page looks through for its matches
PAGE = 50
REFRESH = 5  # seconds between the overview's reloads
TOKEN_COOKIE = "txqueue_token"
CSRF_COOKIE = "txqueue_csrf"
DONE = {
    "retried": "Retried: the task is pending again.",
    "cancelled": "Cancelled: the task will not run.",
    "cancel_requested": "Cancellation requested: the handler sees ctx.cancelled.",
    "retried_failed": "Retried {n} failed tasks.",
}
# No script, no frames, nothing from another origin: a value that slipped past the
# escaping still could not run.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def create_app(
    database_url: str,
    *,
    read_only: bool = False,
    token: str | None = None,
    amqp_url: str | None = None,
) -> Starlette:
    """The dashboard as an ASGI app. ``token``: every request must carry it (once as
    ``?token=…``, kept in a cookie after). ``amqp_url``: where retried tasks' wake-ups
    go (without it, workers find them by polling)."""
    if token is not None and not token.strip():
        raise ConfigError("--token must not be empty")
    if amqp_url is not None:
        client.configure(amqp_url=amqp_url)
    pages = Pages(database_url, read_only)
    routes: list[Route | Mount] = [
        Route("/", pages.overview),
        Route("/tasks", pages.tasks),
        Route("/tasks/{task_id}", pages.task),
        Route("/workers", pages.workers),
        Mount("/static", StaticFiles(packages=[("txqueue.dashboard", "static")]), name="static"),
    ]
    if not read_only:
        routes += [
            Route("/tasks/{task_id}/retry", pages.retry, methods=["POST"]),
            Route("/tasks/{task_id}/cancel", pages.cancel, methods=["POST"]),
            Route("/retry-failed", pages.retry_failed, methods=["POST"]),
        ]
    app = Starlette(routes=routes)
    return Starlette(routes=[Mount("/", app=Guard(app, token))])


def loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything starts: a taken port is one clear error
    rather than the server's own log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def serve(app: Starlette, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until interrupted (SIGINT or SIGTERM)."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])


class Guard:
    """The token check, the CSRF cookie and the security headers, around every request."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._refuse(request)
        if response is not None:
            await response(scope, receive, send)
            return
        fresh = None if request.cookies.get(CSRF_COOKIE) else secrets.token_urlsafe(32)
        if fresh is not None:
            scope.setdefault("state", {})["csrf"] = fresh

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                if fresh is not None:
                    cookie = f"{CSRF_COOKIE}={fresh}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", cookie.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)

    def _refuse(self, request: Request) -> Response | None:
        if self.token is None:
            # Without a token only this machine may ask, and by a loopback name: a page
            # whose domain was re-pointed at 127.0.0.1 (DNS rebinding) is turned away.
            if loopback(_hostname(request.headers.get("host", ""))):
                return None
            return HTMLResponse("unknown host", status_code=421, headers=HEADERS)
        given = request.query_params.get("token")
        if given is not None and _same(given, self.token):
            # Kept in a cookie, and taken out of the address bar and the history.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = "/" + request.url.path.lstrip("/") + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
            return response
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if _same(request.cookies.get(TOKEN_COOKIE, ""), self.token) or _same(bearer, self.token):
            return None
        return HTMLResponse(
            "<!doctype html><title>txqueue</title><p>This dashboard needs its access token: "
            "open it as <code>/?token=…</code>.</p>",
            status_code=401,
            headers=HEADERS,
        )


def _done(request: Request) -> str | None:
    """The notice of the action just done: fixed text, never words from the address."""
    text = DONE.get(request.query_params.get("done", ""))
    n = request.query_params.get("n", "0")
    return None if text is None else text.format(n=int(n) if n.isdigit() else 0)


def _hostname(host: str) -> str:
    """The name in a Host header: without its port, and an IPv6 address without brackets."""
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


class Pages:
    def __init__(self, database_url: str, read_only: bool) -> None:
        self.url = database_url
        self.store: Store = for_url(database_url)
        self.read_only = read_only
        folder = resources.files("txqueue.dashboard") / "templates"
        self.env = Environment(
            loader=FileSystemLoader(str(folder)),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(age=_age, at=_at, number=_number, pretty=_pretty)

    @contextmanager
    def _conn(self) -> Iterator[Any]:
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
        except TaskNotFoundError as exc:
            return self._error(request, 404, str(exc))
        except TaskStateError as exc:
            return self._error(request, 409, str(exc))
        except StoreError as exc:
            return self._error(request, 503, config.scrub(str(exc), self.url))
        except TxQueueError as exc:  # a bad filter or id: named in the message
            return self._error(request, 400, str(exc))

    # --- pages --------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        def page() -> Response:
            with self._conn() as conn:
                counts = self.store.queue_counts(conn, COUNT_CAP)
                rates = self.store.finished_per_minute(conn, RATE_CAP)
                failing = self.store.failing_names(conn, COUNT_CAP, 5)
            return self._render(
                request,
                "overview.html",
                queues=_queues(counts),
                capped=_capped(counts),
                chart=_chart(rates),
                failing=failing,
                refresh=REFRESH,
                states=STATES,
            )

        return self._guarded(request, page)

    def tasks(self, request: Request) -> Response:
        def page() -> Response:
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
            filters = {k: v for k, v in (("state", state), ("queue", queue), ("name", name)) if v}
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
            )

        return self._guarded(request, page)

    def task(self, request: Request) -> Response:
        def page() -> Response:
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

        return self._guarded(request, page)

    def workers(self, request: Request) -> Response:
        def page() -> Response:
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

        return self._guarded(request, page)

    # --- actions ------------------------------------------------------------------------

    async def _checked(self, request: Request) -> bool:
        """A form of this dashboard's own pages: the browser says it comes from this origin
        (another port of the same host is another origin, though it shares the cookies),
        and it carries the token of the page it was on."""
        origin = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if request.headers.get("origin") != origin:
            return False
        form = await request.form()
        given = form.get("csrf")
        cookie = request.cookies.get(CSRF_COOKIE)
        return isinstance(given, str) and bool(cookie) and _same(given, cookie or "")

    async def retry(self, request: Request) -> Response:
        if not await self._checked(request):
            return self._error(request, 403, "the form's CSRF token is missing or stale")
        task_id = request.path_params["task_id"]

        def act() -> Response:
            with self._conn() as conn:
                manage.retry(conn, task_id)
            broker.flush(timeout=3.0)
            return RedirectResponse(f"/tasks/{task_id}?done=retried", status_code=303)

        return await _threaded(lambda: self._guarded(request, act))

    async def cancel(self, request: Request) -> Response:
        if not await self._checked(request):
            return self._error(request, 403, "the form's CSRF token is missing or stale")
        task_id = request.path_params["task_id"]

        def act() -> Response:
            with self._conn() as conn:
                state = manage.cancel(conn, task_id)
            done = "cancelled" if state == CANCELLED else "cancel_requested"
            return RedirectResponse(f"/tasks/{task_id}?done={done}", status_code=303)

        return await _threaded(lambda: self._guarded(request, act))

    async def retry_failed(self, request: Request) -> Response:
        if not await self._checked(request):
            return self._error(request, 403, "the form's CSRF token is missing or stale")
        queue = (await request.form()).get("queue")

        def act() -> Response:
            if not isinstance(queue, str):
                raise ConfigError("queue: missing")
            check_queue(queue)
            with self._conn() as conn:
                count = manage.retry_failed(conn, queue=queue)
            broker.flush(timeout=3.0)
            return RedirectResponse(f"/?done=retried_failed&n={count}", status_code=303)

        return await _threaded(lambda: self._guarded(request, act))


async def _threaded(fn: Callable[[], Response]) -> Response:
    return await run_in_threadpool(fn)


# --- what the templates show -------------------------------------------------------------


def _queues(counts: list[Any]) -> list[dict[str, Any]]:
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, n, ripe, oldest in counts:
        row = queues.setdefault(queue, {"name": queue, "ripe": 0, "oldest": None})
        row[state] = n
        if state == PENDING:
            row["ripe"], row["oldest"] = ripe, oldest
    return [queues[name] for name in sorted(queues)]


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
    skip = {"payload", "result", "errors", "id"}
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


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
