"""How-to "Durable steps", children: an invoice that renders each page as a task of its
own, on any worker, and waits for them parked, holding no worker while they run."""

import os

import psycopg

import txqueue
from txqueue.testing import run_tasks

url = os.environ["TXQUEUE_DATABASE_URL"]
registry = txqueue.Registry()
mailed: list[str] = []


def mail(order: int, pages: list[str]) -> None:
    mailed.append(f"order {order}: {len(pages)} pages")


# --8<-- [start:invoice]
@registry.task(queue="render", max_attempts=1)
def render_page(order: int, page: int) -> str:
    if page > 2:
        raise ValueError(f"no page {page}")
    return f"invoice-{order}-{page}.pdf"


@registry.task(context=True)
def invoice(ctx: txqueue.TaskContext, order: int, pages: int) -> str:
    children = [ctx.start_child(render_page.task(order, n)) for n in range(1, pages + 1)]
    files = []
    for child in children:
        try:
            files.append(ctx.wait_child(child, timeout=3600))
        except txqueue.ChildFailedError as exc:  # it failed, or was cancelled
            return f"not sent: {exc.reason}"
    ctx.step("mail", mail, order, files)
    return f"sent {len(files)} pages"


# --8<-- [end:invoice]

with psycopg.connect(url) as conn:
    sent = invoice.enqueue(conn, order=42, pages=2)
    refused = invoice.enqueue(conn, order=43, pages=3)
ran = run_tasks(registry, url)
assert [r.state for r in ran].count("parked") == 2  # each parent, while its pages render

with psycopg.connect(url) as conn:
    # --8<-- [start:show]
    info = txqueue.get_task(conn, sent)
    print([s.name for s in info.steps])
    # ['child 1', 'child 2', 'wait task:… until', 'wait task:…', ..., 'mail']
    # --8<-- [end:show]
    assert info.result == "sent 2 pages"
    assert [s.name for s in info.steps][:2] == ["child 1", "child 2"]
    assert txqueue.get_task(conn, refused).result == "not sent: builtins.ValueError: no page 3"
assert mailed == ["order 42: 2 pages"]
