"""How-to "Several configurations in one process": two SQLite databases, one registry."""

import subprocess
import sys

for name in ("shop", "blog"):  # the page's `txqueue init` lines
    subprocess.run(
        [sys.executable, "-m", "txqueue", "init", "--database-url", f"sqlite:///{name}.db"],
        check=True,
        capture_output=True,
    )

# --8<-- [start:apps]
import sqlite3
from contextlib import closing

import txqueue

registry = txqueue.Registry()


@registry.task(queue="hello")
def greet(site: str) -> None:
    print("hello from", site)


shop = txqueue.App(registry, database_url="sqlite:///shop.db", amqp_url=None)
blog = txqueue.App(registry, database_url="sqlite:///blog.db", amqp_url=None)

registry.bind(shop)  # greet.enqueue goes through shop's store and wake-ups

with closing(sqlite3.connect("shop.db")) as conn, txqueue.transaction(conn):
    task_id = greet.enqueue(conn, site="shop")
with closing(sqlite3.connect("blog.db")) as conn, txqueue.transaction(conn):
    greet.options(app=blog).enqueue(conn, site="blog")  # this one through blog

shop.worker().run(burst=True)  # prints "hello from shop"
blog.worker().run(burst=True)  # prints "hello from blog"
with closing(sqlite3.connect("shop.db")) as conn:
    print(shop.get_task(conn, task_id).state)  # succeeded
# --8<-- [end:apps]

for name in ("shop", "blog"):
    with closing(sqlite3.connect(f"{name}.db")) as conn:
        assert conn.execute("SELECT state FROM txqueue_tasks").fetchall() == [("succeeded",)]
