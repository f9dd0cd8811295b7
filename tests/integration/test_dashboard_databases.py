"""The dashboard of several databases: a first page of each one's tasks, labelled, read
side by side (one out of reach or hanging is said on its row); each one's pages under
``/db/<name>/`` with their links and actions kept there; what it retries woken on its
database's queues; and ``txqueue dashboard`` serving every database configured."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
import uuid
from contextlib import closing

import httpx
import psycopg
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import txqueue
from tests.partition import RABBITMQ
from txqueue import App, Task, config
from txqueue.dashboard import app as dashboard
from txqueue.outbox import client

from .conftest import NAMES
from .helpers import free_port, running, wait_until
from .test_cli import ROOT, TXQUEUE
from .test_dashboard import csrf, fail, serving
from .test_databases import recording

LINK = re.compile(r'(?:href|action)="([^"]*)"')


def enqueue(url: str, queue: str, n: int) -> list[str]:
    with closing(psycopg.connect(url, autocommit=True)) as c:
        return [str(txqueue.enqueue(c, Task("rec", i, queue=queue))) for i in range(n)]


def links(page: str) -> set[str]:
    return {m.group(1) for m in LINK.finditer(page)}


@RABBITMQ
def test_each_database_is_shown_labelled_and_acted_on_under_its_own_path(
    shards: dict[str, str], services: tuple[str, str], routed_queues: str
) -> None:
    """The first page counts each database's tasks; a database's pages link only within
    it; a retry there wakes its fleet (polls a minute apart) through its own queue."""
    queue = routed_queues
    registry, ran = recording(queue)
    with App(registry, databases=shards, amqp_url=services[1]) as app:
        app.init()
        fleet = app.fleet(poll_interval=60)
    for i, name in enumerate(NAMES):
        enqueue(shards[name], queue, i + 1)
    [failed] = enqueue(shards["us"], queue, 1)
    fail(shards["us"], uuid.UUID(failed))
    try:
        served = dashboard.create_app(databases=shards, amqp_url=services[1])
        with serving(served) as web:
            first = web.get("/")
            assert first.status_code == 200
            rows = re.findall(
                r'<a href="/db/(\w+)/">\1</a></td>\s*<td class="n">(\d+)</td>\s*'
                r'<td class="n">(\d+)</td>',
                first.text,
            )
            assert rows == [("eu", "1", "1"), ("us", "1", "2"), ("ap", "1", "3")]
            assert '<a href="/db/us/tasks?state=failed">1</a>' in first.text
            assert web.get("/static/style.css").status_code == 200

            page = web.get("/db/us/")
            assert page.status_code == 200
            assert "<title>Overview · us · txqueue</title>" in page.text
            assert '<a href="/db/us/" aria-current="page">us</a>' in page.text
            inside = {u for u in links(page.text) if not u.startswith(("/db/us/", "/static/"))}
            assert inside == {"/", "/db/eu/", "/db/ap/"}, inside  # the databases' own nav
            assert failed not in web.get("/db/eu/tasks", params={"state": "failed"}).text
            found = web.get("/db/us/tasks", params={"id": failed}, follow_redirects=False)
            assert found.headers["location"] == f"/db/us/tasks/{failed}"
            assert web.get(f"/db/eu/tasks/{failed}").status_code == 404

            with running(fleet):
                # Within 30 s, half the poll interval: only the start's poll, then only the
                # retry's wake-up, can start them (a loaded machine took over 10 s once).
                wait_until(lambda: len(ran) == 6, timeout=30)
                task = web.get(f"/db/us/tasks/{failed}")
                done = web.post(
                    f"/db/us/tasks/{failed}/retry",
                    data={"csrf": csrf(task.text)},
                    follow_redirects=False,
                )
                assert done.status_code == 303, done.text
                assert done.headers["location"] == f"/db/us/tasks/{failed}?done=retried"
                wait_until(lambda: len(ran) == 7, timeout=30)
    finally:
        txqueue.configure()


def test_a_database_out_of_reach_or_hanging_is_said_and_the_others_shown(
    shards: dict[str, str],
) -> None:
    """One refusing connections, one accepting them and never answering (as a partition
    leaves it): the page comes within the wait, the others' counts on it, no password."""
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(8)
    port = hanging.getsockname()[1]
    given = {
        "eu": shards["eu"],
        "gone": "postgresql://postgres:s3cret@127.0.0.1:1/nothing",
        "stuck": f"postgresql://postgres:s3cret@127.0.0.1:{port}/nothing",
    }
    enqueue(shards["eu"], "q", 2)
    try:
        with serving(dashboard.create_app(databases=given)) as web:
            started = time.monotonic()
            page = web.get("/")
            took = time.monotonic() - started
        assert page.status_code == 200
        assert took < 9, took  # the stuck one's connect gives up after 10 s; the page not
        assert re.search(r'<a href="/db/eu/">eu</a></td>\s*<td class="n">1</td>', page.text)
        assert re.search(r"/db/gone/.*\s*<td [^>]*>out of reach: ", page.text)
        assert "out of reach: no answer within 5 s" in page.text
        assert "s3cret" not in page.text
        assert not client.default_delivery().named  # its App's wake-ups are its own
    finally:
        hanging.close()


def test_mounted_under_a_path_its_links_redirects_and_cookies_stay_there(
    pg_url: str, shards: dict[str, str]
) -> None:
    """Inside another app: one database's dashboard, guarded by a token whose cookie is
    kept for its path, and one of several databases beside it."""
    [task_id] = enqueue(pg_url, "q", 1)
    outer = Starlette(
        routes=[
            Mount("/ops/queue", app=dashboard.create_app(pg_url, token="t0ken")),
            Mount("/ops/shards", app=dashboard.create_app(databases=shards)),
        ]
    )
    with serving(outer) as web:
        refused = web.get("/ops/queue/tasks")
        assert refused.status_code == 401 and "/ops/queue/?token=" in refused.text
        given = web.get("/ops/queue/tasks", params={"token": "t0ken"}, follow_redirects=False)
        assert given.headers["location"] == "/ops/queue/tasks"
        assert "path=/ops/queue;" in given.headers["set-cookie"].lower()
        page = web.get("/ops/queue/tasks")
        assert page.status_code == 200
        assert "Path=/ops/queue;" in page.headers["set-cookie"]  # the CSRF cookie
        assert links(page.text) and all(u.startswith("/ops/queue/") for u in links(page.text))
        found = web.get("/ops/queue/tasks", params={"id": task_id}, follow_redirects=False)
        assert found.headers["location"] == f"/ops/queue/tasks/{task_id}"

        first = web.get("/ops/shards/")
        assert all(f'href="/ops/shards/db/{n}/"' in first.text for n in NAMES)
        one = web.get("/ops/shards/db/us/tasks")
        assert one.status_code == 200
        assert all(u.startswith("/ops/shards/") for u in links(one.text)), links(one.text)


@pytest.mark.parametrize("given", ["environment", "flags"])
def test_txqueue_dashboard_serves_every_database_given(shards: dict[str, str], given: str) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    flags = [f"--database={n}={u}" for n, u in shards.items()]
    if given == "environment":
        env[config.DATABASES_ENV] = " ".join(f"{n}={u}" for n, u in shards.items())
        flags = []
    server = subprocess.Popen(
        [*TXQUEUE, "dashboard", "--port", str(port), *flags],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stderr is not None
        assert "for databases eu, us, ap" in server.stderr.readline()
        deadline = time.monotonic() + 15
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the dashboard never answered"
                time.sleep(0.1)
        assert all(f'<a href="/db/{n}/">{n}</a>' in page.text for n in NAMES)
        one = httpx.get(f"http://127.0.0.1:{port}/db/ap/workers")
        assert one.status_code == 200 and "Workers · ap · txqueue" in one.text
    finally:
        server.terminate()
        server.communicate(timeout=10)
