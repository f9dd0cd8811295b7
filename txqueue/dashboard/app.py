"""The dashboard's web app: its routes, the guard every request passes (the token, the
Host, the CSRF cookie, the security headers), and its server.

Pages are rendered on the server with no script; every action is a POST from the
dashboard's own origin carrying the CSRF token of its page (double submit: the form's
field must equal the cookie)."""

from __future__ import annotations

import html
import ipaddress
import secrets
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from .. import config
from ..app import App
from ..errors import ConfigError
from ..outbox import client
from ..store import for_url

MISSING = "the dashboard needs its extra: pip install 'txqueue[dashboard]'"

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import BaseRoute, Mount, Route
    from starlette.staticfiles import StaticFiles
    from starlette.types import ASGIApp, Receive, Scope, Send

    from .actions import Actions
    from .index import Index
    from .pages import CSRF_COOKIE, Pages, same
    from .schedules import SchedulePages
except ImportError:
    raise ConfigError(MISSING) from None

TOKEN_COOKIE = "txqueue_token"
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
    database_url: str | None = None,
    *,
    databases: Mapping[str, str] | None = None,
    read_only: bool = False,
    token: str | None = None,
    amqp_url: str | None = None,
) -> Starlette:
    """The dashboard as an ASGI app, of one database or of several named ``databases``
    (``{"eu": url, …}``: a first page of each one's tasks by state, and each one's pages
    under ``/db/<name>/``; the wake-ups of what it retries go to their database's queues).
    ``token``: every request must carry it (once as ``?token=…``, kept in a cookie after).
    ``amqp_url``: where retried tasks' wake-ups go (without it, workers find them by
    polling). It may be mounted under a path of another app: its links follow."""
    if token is not None and not token.strip():
        raise ConfigError("--token must not be empty")
    named = config.databases(databases) if databases else {}
    if (database_url is None) == (not named):
        raise ConfigError("databases: give database_url or databases, one of them")
    if amqp_url is not None:
        client.configure(amqp_url=amqp_url)
    static = Mount("/static", StaticFiles(packages=[("txqueue.dashboard", "static")]))
    if database_url is not None:
        routes = [*_routes(Pages(for_url(database_url), database_url, read_only)), static]
    else:
        calls = App(databases=named, amqp_url=config.FROM_ENV if amqp_url is None else amqp_url)
        each = {
            n: Pages(for_url(url), url, read_only, n, list(named), calls)
            for n, url in named.items()
        }
        routes = [Route("/", each[next(iter(each))].page(Index(each).overview)), static]
        routes += [Mount(f"/db/{name}", routes=_routes(pages)) for name, pages in each.items()]
    app = Starlette(routes=routes)
    return Starlette(routes=[Mount("/", app=Guard(app, token))])


def _routes(pages: Pages[Any]) -> list[BaseRoute]:
    """One database's pages, and its actions unless read-only."""
    timetable = SchedulePages(pages)
    act = Actions(pages)
    routes: list[BaseRoute] = [
        Route("/", pages.page(pages.overview)),
        Route("/tasks", pages.page(pages.tasks)),
        Route("/tasks/{task_id}", pages.page(pages.task)),
        Route("/workflows/{workflow_id}", pages.page(pages.workflow)),
        Route("/workers", pages.page(pages.workers)),
        Route("/dead-letters", pages.page(pages.dead_letters)),
        Route("/schedules", pages.page(timetable.schedules)),
    ]
    if pages.read_only:
        return routes
    return [
        *routes,
        Route("/tasks/{task_id}/retry", pages.action(act.retry), methods=["POST"]),
        Route("/tasks/{task_id}/cancel", pages.action(act.cancel), methods=["POST"]),
        Route(
            "/workflows/{workflow_id}/cancel", pages.action(act.cancel_workflow), methods=["POST"]
        ),
        Route("/tasks/bulk", pages.action(act.bulk_tasks), methods=["POST"]),
        Route("/dead-letters/{action:str}", pages.action(act.dead_letter_group), methods=["POST"]),
        Route("/retry-failed", pages.action(act.retry_failed), methods=["POST"]),
        Route("/queues/pause", pages.action(act.pause_queue), methods=["POST"]),
        Route("/queues/resume", pages.action(act.resume_queue), methods=["POST"]),
        Route("/queues/limit", pages.action(act.limit_queue), methods=["POST"]),
        Route("/schedules/create", pages.action(timetable.create), methods=["POST"]),
        Route("/schedules/change", pages.action(timetable.change), methods=["POST"]),
        Route("/schedules/{action:str}", pages.action(timetable.act), methods=["POST"]),
    ]


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
                    cookie = (
                        f"{CSRF_COOKIE}={fresh}; Path={_home(scope)}; HttpOnly; SameSite=Strict"
                    )
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
        if given is not None and same(given, self.token):
            # Kept in a cookie, and taken out of the address bar and the history.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = "/" + request.url.path.lstrip("/") + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                TOKEN_COOKIE,
                self.token,
                path=_home(request.scope),
                httponly=True,
                samesite="strict",
            )
            return response
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if same(request.cookies.get(TOKEN_COOKIE, ""), self.token) or same(bearer, self.token):
            return None
        home = html.escape(request.scope.get("root_path", ""))
        return HTMLResponse(
            "<!doctype html><title>txqueue</title><p>This dashboard needs its access token: "
            f"open it as <code>{home}/?token=…</code>.</p>",
            status_code=401,
            headers=HEADERS,
        )


def _home(scope: Scope) -> str:
    """The path the dashboard is served under, its cookies' ``Path``: two dashboards
    mounted in one app keep a cookie each, and the app's other routes see neither."""
    return str(scope.get("root_path", "")).rstrip("/") or "/"


def _hostname(host: str) -> str:
    """The name in a Host header: without its port, and an IPv6 address without brackets."""
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
