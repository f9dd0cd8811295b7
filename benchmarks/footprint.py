"""What a finished task costs on disk, part by part: the row's columns, the heap, TOAST and
each index of txqueue_tasks, per task.

    python benchmarks/footprint.py [--tasks 20000] [--result]

No-op tasks (payload ``{}``), each enqueued in a transaction of its own as an application
does, run by one worker in a burst (threads, polling) until none is left, then measured
three times, less what the empty schema takes: as the worker left them in their slot
(each task's dead versions still there); once the slot upkeep has copied them to
``txqueue_tasks_history`` in bulk and truncated the slot, which the workers do a few
seconds after a slot's last task ends (what retention keeps: the figure the storage
page's sizing rule multiplies); and after ``VACUUM FULL`` (the rows alone, packed).
``--result`` makes each task return a small result (``{"ok": true}``) instead of None;
``--failures K`` makes each fail its first K attempts (a ValueError, retried at once).

Against TXQUEUE_BENCH_DATABASE_URL (an admin URL; a scratch database is made and dropped).
"""

from __future__ import annotations

import argparse
import logging
import os
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

import txqueue
from txqueue import Task

QUEUE = "footprint"

# Each relation that holds txqueue_tasks, with its kind: the partitions' heaps, their TOAST
# tables (with the TOAST index) and every index.
RELATIONS = """
SELECT c.relname, 'heap', pg_relation_size(c.oid)
FROM pg_partition_tree('txqueue_tasks') AS p JOIN pg_class AS c ON c.oid = p.relid
WHERE p.isleaf
UNION ALL
SELECT c.relname, 'toast', pg_total_relation_size(c.reltoastrelid)
FROM pg_partition_tree('txqueue_tasks') AS p JOIN pg_class AS c ON c.oid = p.relid
WHERE p.isleaf AND c.reltoastrelid <> 0
UNION ALL
SELECT i.indexrelid::regclass::text, 'index', pg_relation_size(i.indexrelid)
FROM pg_partition_tree('txqueue_tasks') AS p JOIN pg_index AS i ON i.indrelid = p.relid
WHERE p.isleaf
"""

LEAVES = "SELECT relid::regclass::text FROM pg_partition_tree('txqueue_tasks') WHERE isleaf"

COLUMNS = """
SELECT attname FROM pg_attribute
WHERE attrelid = 'txqueue_tasks'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--result", action="store_true")
    parser.add_argument("--failures", type=int, default=0)
    args = parser.parse_args()
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"footprint_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    try:
        empty = fill(url, args.tasks, args.result, args.failures)
        with psycopg.connect(url, autocommit=True) as conn:
            report(conn, args.tasks, empty, "as the worker left them, in their slot")
            reclaim(url, args.tasks)
            report(conn, args.tasks, empty, "once moved to history, as retention keeps them")
            for (leaf,) in conn.execute(LEAVES).fetchall():
                conn.execute(f"VACUUM FULL {leaf}")
            report(conn, args.tasks, empty, "after VACUUM FULL")
            columns(conn)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fill(url: str, n: int, result: bool, failures: int) -> dict[str, int]:
    """``n`` no-op tasks, one per transaction, run to the end by one worker; what each
    relation took before."""
    import txqueue.store as stores

    store = stores.for_url(url)
    with store.connect(url) as conn:
        store.apply_schema(conn)
    with psycopg.connect(url) as conn:
        empty = {rel: size for rel, _, size in conn.execute(RELATIONS).fetchall()}
    registry = txqueue.Registry()

    @registry.task("noop", queue=QUEUE, backoff=0, max_attempts=failures + 1, context=True)
    def noop(ctx: txqueue.TaskContext) -> dict[str, bool] | None:
        if ctx.attempt <= failures:
            raise ValueError("failed on purpose")
        return {"ok": True} if result else None

    txqueue.configure(amqp_url=None)  # no broker: a NOTIFY, which leaves nothing in a row
    with psycopg.connect(url) as conn:
        for _ in range(n):
            with txqueue.transaction(conn):
                txqueue.enqueue(conn, Task("noop", queue=QUEUE))
    logging.getLogger("txqueue").setLevel(logging.CRITICAL)  # a line per failure, else
    worker = txqueue.Worker(registry, database_url=url, amqp_url=None, cleaner=False)
    worker.run(burst=True)
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM txqueue_tasks WHERE state = 'succeeded'")
        done = row.fetchone()
    assert done is not None and done[0] == n, f"{done} of {n} succeeded"
    return empty


def reclaim(url: str, n: int) -> None:
    """Turn the slots until every finished task is in history, as the workers' upkeep does
    a few seconds after a slot's last task ends: each slot copied there in bulk, then
    truncated."""
    import txqueue.store as stores

    store = stores.for_url(url)
    with store.connect(url) as conn:
        for _ in range(20):
            store.keep_slots(conn, 0.001)
            row = conn.execute("SELECT count(*) FROM txqueue_tasks_history").fetchone()
            if row is not None and row[0] == n:
                return
    raise SystemExit("the slots were not reclaimed")


def report(conn: psycopg.Connection[Any], n: int, empty: dict[str, int], when: str) -> None:
    """Bytes a task, by kind and relation: each relation's growth since the empty schema."""
    # A relation that shrank (an emptied slot's index) counts as none: the parts add up.
    rows = [
        (rel, kind, max(0, size - empty.get(rel, 0))) for rel, kind, size in conn.execute(RELATIONS)
    ]
    total = sum(size for _, _, size in rows)
    print(f"\n{n:,} finished no-op tasks, {when}: {total / n:,.0f} bytes a task")
    for kind in ("heap", "toast", "index"):
        part = [(rel, size) for rel, k, size in rows if k == kind and size > 0]
        print(f"  {kind:6} {sum(s for _, s in part) / n:8,.0f}")
        for rel, size in sorted(part, key=lambda r: -r[1]):
            print(f"    {rel:40} {size / n:8,.1f}")


def columns(conn: psycopg.Connection[Any]) -> None:
    """The average stored size of each column of a finished task's row, and of the row."""
    names = [r[0] for r in conn.execute(COLUMNS).fetchall()]
    sizes = ", ".join(f'avg(pg_column_size("{c}"))' for c in names)
    row = conn.execute(f"SELECT avg(pg_column_size(t.*)), {sizes} FROM txqueue_tasks AS t")
    whole, *each = row.fetchone() or (0,)
    print(f"\nthe row, as stored (no header, no item pointer): {float(whole):,.0f} bytes")
    for c, size in sorted(zip(names, each, strict=True), key=lambda r: -float(r[1] or 0)):
        if size:
            print(f"  {c:18} {float(size):6.1f}")


if __name__ == "__main__":
    main()
