"""How-to "The dashboard": mounted under a path of another ASGI app."""

import os

from starlette.testclient import TestClient

import txqueue

url = os.environ["TXQUEUE_DATABASE_URL"]
txqueue.App(database_url=url).init()

# --8<-- [start:mount]
from starlette.applications import Starlette
from starlette.routing import Mount

from txqueue.dashboard import create_app

ops = Starlette(
    routes=[
        Mount("/ops/queue", app=create_app(url, read_only=True)),
        # or create_app(databases={"eu": eu_url, "us": us_url})
    ]
)
# --8<-- [end:mount]

with TestClient(ops, base_url="http://127.0.0.1") as web:  # a loopback name: no token needed
    page = web.get("/ops/queue/tasks")
    assert page.status_code == 200, page.text
    assert 'href="/ops/queue/workers"' in page.text and 'href="/workers"' not in page.text
