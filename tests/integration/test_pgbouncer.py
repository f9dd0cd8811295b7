"""The contract through a real PgBouncer in transaction mode: every statement txqueue sends
must hold when each transaction may run on another server session (no prepared statements,
no startup options, no session locks, no LISTEN)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

import txqueue
from txqueue import Event, Task
from txqueue.errors import StoreError
from txqueue.store import POSTGRES
from txqueue.store.postgres.connection import connect_args

from .helpers import count, execute, rows, wait_until
from .pgbouncer import pgbouncer, through
from .test_cli import app_workers, cli, recorded_runs

pytestmark = pytest.mark.xdist_group("test_pgbouncer")


@pytest.fixture(scope="module")
def bouncer(servers: tuple[str, str]) -> Iterator[int]:
    with pgbouncer(servers[0]) as port:
        yield port


class RolledBack(Exception):
    pass


def app_connection(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """How an application connects through PgBouncer before 1.21: no prepared statements."""
    return psycopg.connect(url, prepare_threshold=None)


def test_enqueue_workers_cleaner_and_cli_hold_through_pgbouncer(
    pg_url: str, amqp_url: str, queue: str, bouncer: int, tmp_path: Path
) -> None:
    url = through(pg_url, bouncer)
    app_url = through(pg_url, bouncer, flag=False)
    assert cli("init", "--database-url", url).returncode == 0  # its lock is transaction-scoped
    env = {
        **os.environ,
        "TXQUEUE_DATABASE_URL": url,
        "TXQUEUE_AMQP_URL": amqp_url,
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    workers = app_workers(2, env, "--concurrency", "4", "--poll-interval", "0.2")
    committed: list[str] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        # Eight clients and two workers share three server sessions: a statement relying on
        # session state would meet another client's session.
        with closing(app_connection(app_url)) as c:
            for i in range(25):
                keep = (n + i) % 5 != 0
                tasks = [Task("record", {"n": n, "i": i, "j": j}, queue=queue) for j in range(3)]
                try:
                    with txqueue.transaction(c):
                        ids = [str(t) for t in txqueue.enqueue_many(c, tasks)]
                        if not keep:
                            raise RolledBack
                except RolledBack:
                    continue
                with lock:
                    committed.extend(ids)

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not [t for t in threads if t.is_alive()], "a client did not finish"
        wait_until(lambda: count(pg_url, "state = 'succeeded'") == len(committed), timeout=60)

        # A worker that died mid-task: taken back through the pooler, by the workers' own
        # look for expired leases or by this cleaner, whichever comes first.
        with closing(app_connection(app_url)) as c, txqueue.transaction(c):
            orphan = str(txqueue.enqueue(c, Task("record", {"orphan": True}, queue=queue)))
        wait_until(lambda: count(pg_url, f"id = '{orphan}' AND state = 'succeeded'") == 1)
        execute(
            pg_url,
            "UPDATE txqueue_tasks SET state = 'running', worker_id = 'gone', "
            "expires_at = now() - interval '1 minute', finished_at = NULL WHERE id = %s",
            (orphan,),
        )
        cleaned = cli("cleaner", "--once", "--database-url", url, "--amqp-url", amqp_url)
        assert cleaned.returncode == 0, cleaned.stderr
        assert "recovered " in cleaned.stdout, cleaned.stdout
        wait_until(lambda: count(pg_url, f"id = '{orphan}' AND state = 'succeeded'") == 1)
        [moves] = [r["events"] for r in rows(pg_url, f"id = '{orphan}'")]
        assert [Event.of_json(e).move for e in moves][-2:] == ["recovered", "succeeded"], moves
        info = txqueue.wait(url, orphan, timeout=10)  # polls: no LISTEN through the pooler
        assert info.state == "succeeded" and info.attempts == 2

        status = cli("status", "--database-url", url, "--amqp-url", amqp_url)
        assert status.returncode == 0 and queue in status.stdout, status.stderr
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        errors = [w.communicate(timeout=30)[1] for w in workers]
    assert all(w.returncode == 0 for w in workers), errors
    assert not [e for e in errors if "prepared statement" in e or "Traceback" in e], errors
    runs = recorded_runs(tmp_path)
    assert sorted(str(r["id"]) for r in rows(pg_url, "state = 'succeeded'")) == sorted(
        [*committed, orphan]
    )
    assert all(runs[i] == 1 for i in committed)  # nothing rolled back ran, nothing twice
    assert len(runs) == len(committed) + 1


def test_without_the_flag_pgbouncer_refuses_and_the_error_names_the_fix(
    pg_url: str, bouncer: int
) -> None:
    with pytest.raises(StoreError, match=r"unsupported startup parameter.*\?pgbouncer=true"):
        POSTGRES.connect(through(pg_url, bouncer, flag=False))


def test_through_a_pooler_the_server_must_default_to_read_committed(
    pg_url: str, bouncer: int
) -> None:
    database = pg_url.rsplit("/", 1)[1]
    execute(
        pg_url, f"ALTER DATABASE {database} SET default_transaction_isolation = 'repeatable read'"
    )
    with pytest.raises(StoreError, match=r"ALTER ROLE .* SET default_transaction_isolation"):
        POSTGRES.connect(through(pg_url, bouncer))


def test_only_txqueues_own_parameter_leaves_the_url() -> None:
    url = "postgresql://u:p%2Bq@h:6432/db?sslmode=disable&pgbouncer=true&options=-c%20a%3Db"
    conninfo, args = connect_args(url, "txqueue-test")
    assert conninfo == "postgresql://u:p%2Bq@h:6432/db?sslmode=disable&options=-c%20a%3Db"
    assert args["prepare_threshold"] is None and "options" not in args
    direct, args = connect_args("postgresql://h/db?keepalives_idle=5", "txqueue-test")
    assert direct == "postgresql://h/db?keepalives_idle=5"
    assert "keepalives_idle" not in args and args["tcp_user_timeout"] == 30_000  # the URL's wins
    assert "default_transaction_isolation" in args["options"]
