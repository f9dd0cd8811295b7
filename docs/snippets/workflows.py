"""How-to "Workflows": a fan-out joined then chained, a step that runs whatever its parent
did, a workflow cancelled, the workflows listed, and one run to its end in a test."""

import os

import psycopg

url = os.environ["TXQUEUE_DATABASE_URL"]

# --8<-- [start:tasks]
from dataclasses import dataclass

import txqueue

registry = txqueue.Registry()


@dataclass
class Page:
    url: str
    words: int


@registry.task(queue="crawl")
def fetch(url: str) -> Page:
    return Page(url, len(url))


@registry.task(queue="crawl")
def count(pages: list[Page]) -> int:
    return sum(p.words for p in pages)


@registry.task(queue="crawl")
def report(total: int, title: str) -> str:
    return f"{title}: {total} words"


# --8<-- [end:tasks]

# --8<-- [start:declare]
flow = txqueue.Workflow("word count")
pages = [flow.step(fetch, url) for url in ("a.example", "b.example")]  # a group
total = flow.step(count, flow.results(pages))  # a join: waits for both, takes their results
done = flow.step(report, total.result, title="nightly")  # a chain: after count, with its result

with psycopg.connect(url) as conn:  # your transaction
    workflow_id = txqueue.enqueue_workflow(conn, flow)
    # ... your own writes; every step exists if and only if this commits
# --8<-- [end:declare]

# --8<-- [start:run]
worker = txqueue.Worker(registry, database_url=url, amqp_url=None, queues=["crawl"])
worker.run(burst=True)  # here: until nothing is left; in production, `txqueue worker`

info = txqueue.wait_workflow(url, workflow_id, timeout=30)
assert info.state == "succeeded"
assert info.results == {"report": "nightly: 18 words"}  # its final steps' results
assert [s.step for s in info.steps] == ["fetch", "fetch#2", "count", "report"]
# --8<-- [end:run]


# --8<-- [start:failure]
@registry.task(queue="crawl", max_attempts=1)
def flaky(url: str) -> Page:
    raise ConnectionError(f"{url} is down")


@registry.task(queue="crawl")
def audit(seen: list[txqueue.Outcome[Page]]) -> list[str]:
    return [o.result.url if o.succeeded else f"{o.state}: {o.reason}" for o in seen]


flow = txqueue.Workflow("audit")
good, bad = flow.step(fetch, "a.example"), flow.step(flaky, "b.example")
blocked = flow.step(count, flow.results([good, bad]))  # needs both results: never runs
audited = flow.step(audit, flow.outcomes([good, bad]))  # takes their outcomes: runs
cleanup = flow.add(txqueue.Task("cleanup", queue="crawl"), after=[bad], on_failure="run")
# --8<-- [end:failure]


@registry.task("cleanup", queue="crawl")
def cleanup_task() -> None:
    pass


with psycopg.connect(url) as conn:
    txqueue.enqueue_workflow(conn, flow)
txqueue.Worker(registry, database_url=url, amqp_url=None, queues=["crawl"]).run(burst=True)
info = txqueue.wait_workflow(url, flow.id, timeout=30)
assert info.state == "failed"
assert info.step("count").move == "blocked"
down = "builtins.ConnectionError: b.example is down"
assert info.step("count").reason == f"parent flaky ({bad.id}) failed: {down}"
assert info.step("audit").result == ["a.example", f"failed: {down}"]
assert info.step("cleanup").state == "succeeded"

# --8<-- [start:retry]
with psycopg.connect(url) as conn:
    txqueue.retry(conn, bad.id, by="ops")  # flaky runs again; count waits for it again
    assert txqueue.get_workflow(conn, flow.id).step("count").state == "waiting"
# --8<-- [end:retry]
with psycopg.connect(url) as conn:
    txqueue.cancel_workflow(conn, flow.id)

# --8<-- [start:cancel]
later = txqueue.Workflow("later")
later.step(count, flow.results([later.step(fetch, "c.example")]))
with psycopg.connect(url) as conn:
    txqueue.enqueue_workflow(conn, later)
with psycopg.connect(url) as conn:
    assert txqueue.cancel_workflow(conn, later.id, by="ops") == 2  # the steps not ended
# --8<-- [end:cancel]
with psycopg.connect(url) as conn:
    assert txqueue.get_workflow(conn, later.id).state == "cancelled"

# --8<-- [start:list]
with psycopg.connect(url) as conn:
    ended = ["failed", "cancelled"]
    page = txqueue.list_workflows(conn, state=ended, limit=50)
    while page:
        for summary in page:  # newest first
            print(summary.name, summary.state, summary.steps["cancelled"])  # later cancelled 2
        page = txqueue.list_workflows(conn, state=ended, limit=50, before=page[-1].id)
# --8<-- [end:list]
with psycopg.connect(url) as conn:
    listed = txqueue.list_workflows(conn)
    assert [(w.name, w.state) for w in listed] == [
        ("later", "cancelled"),
        ("audit", "cancelled"),  # its failed step retried, then cancelled
        ("word count", "succeeded"),
    ]
    assert listed[0].steps["cancelled"] == 2 and listed[2].steps["succeeded"] == 4
    assert listed[0].finished_at is not None

# --8<-- [start:test]
from txqueue.testing import run_tasks


def test_the_word_count() -> None:
    flow = txqueue.Workflow("word count")
    flow.step(count, flow.results([flow.step(fetch, "a.example")]))
    with psycopg.connect(url) as conn:
        txqueue.enqueue_workflow(conn, flow)
    ran = run_tasks(registry, url)  # every step, each after its parents, on this thread
    assert [r.name for r in ran] == ["fetch", "count"]
    with psycopg.connect(url) as conn:
        assert txqueue.get_workflow(conn, flow.id).step("count").result == total_words


# --8<-- [end:test]
total_words = 9
test_the_word_count()
