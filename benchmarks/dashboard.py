"""How fast the dashboard answers with a million tasks in the table (run by hand).

    python benchmarks/dashboard.py [--rows 1000000] [--runs 7] [--databases 1]
                                   [--database-url URL]

Creates a database of its own (dropped at the end), fills it with ``--rows`` tasks made
over the last ~14 hours as a busy queue leaves them (mostly succeeded; 0.1% failed with a
traceback, 0.1% pending), serves the dashboard on uvicorn and times each page over HTTP:
the median and the worst of ``--runs`` requests, after one to warm up. ``--databases N``
makes N such databases, served as several: the first page of all, then the first one's.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import uvicorn

from txqueue.dashboard import create_app
from txqueue.store import POSTGRES

SEED = """
INSERT INTO txqueue_tasks (id, queue, name, payload, state, run_at, start_time,
                           finished_at, attempts, worker_id, result, errors, created_at)
SELECT (lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '70008000'
        || lpad(to_hex(i), 12, '0'))::uuid,
       'q' || (i %% 5), 'task.' || (i %% 20), jsonb_build_object('order', i, 'note', 'text'),
       CASE WHEN i %% 1000 = 0 THEN 'failed' WHEN i %% 997 = 0 THEN 'pending'
            ELSE 'succeeded' END,
       ts, ts, CASE WHEN i %% 997 = 0 THEN NULL ELSE ts END, 1, 'w1', '{"ok": true}',
       CASE WHEN i %% 1000 = 0 THEN jsonb_build_array(jsonb_build_object(
           'attempt', 1, 'type', 'ValueError', 'message', 'bad input',
           'traceback', repeat('  File "app.py", line 1, in handler\\n', 20)))
            ELSE '[]' END,
       ts
FROM (SELECT i, now() - make_interval(secs => (%(rows)s - i) * 0.05) AS ts
      FROM generate_series(1, %(rows)s) AS i) AS s
"""

PAGES = ["/", "/tasks", "/tasks?state=failed", "/tasks?queue=q3&name=task.8", "/workers"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--databases", type=int, default=1)
    args = parser.parse_args()
    names = [f"txqueue_bench_dashboard_{uuid.uuid4().hex[:8]}" for _ in range(args.databases)]
    admin = psycopg.connect(args.database_url, autocommit=True)
    parts = urlsplit(args.database_url)
    urls = {f"d{i + 1}": urlunsplit(parts._replace(path=f"/{n}")) for i, n in enumerate(names)}
    try:
        for name, url in zip(names, urls.values(), strict=True):
            admin.execute(f"CREATE DATABASE {name}")
            with POSTGRES.connect(url) as conn:
                POSTGRES.apply_schema(conn)
                started = time.perf_counter()
                conn.execute(SEED, {"rows": args.rows})
                conn.execute("VACUUM ANALYZE txqueue_tasks")
                print(f"{args.rows:,} tasks written in {time.perf_counter() - started:.0f}s")
        # A task page too: one of the failed ones, with its traceback.
        url = urls["d1"]
        with POSTGRES.connect(url) as conn:
            row = conn.execute(
                "SELECT id FROM txqueue_tasks WHERE state = 'failed' LIMIT 1"
            ).fetchone()
        pages = [*PAGES, f"/tasks/{row[0]}"] if row else PAGES
        if len(urls) == 1:
            run(create_app(url), pages, args.runs)
        else:
            run(create_app(databases=urls), ["/", *(f"/db/d1{p}" for p in pages)], args.runs)
    finally:
        for name in names:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def run(app: object, pages: list[str], runs: int) -> None:
    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    print(f"{'page':40} {'median':>9} {'worst':>9}")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for page in pages:
            client.get(page).raise_for_status()
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                client.get(page).raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
            print(f"{page:40} {statistics.median(times):7.1f}ms {max(times):7.1f}ms")
    server.should_exit = True
    thread.join(10)


if __name__ == "__main__":
    main()
