"""The txqueue command in real processes: the happy path, signals, and every error path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import pytest

import txqueue
from tests.partition import RABBITMQ
from txqueue import Task, broker
from txqueue.store import for_url

from .helpers import (
    ago,
    connect,
    consumers,
    count,
    drop_schema,
    execute,
    rows,
    running,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
TXQUEUE = [sys.executable, "-m", "txqueue"]


def cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path = ROOT,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    full_env.update(env or {})
    return subprocess.run(
        [*TXQUEUE, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def app_workers(count: int, env: dict[str, str], *flags: str) -> list[subprocess.Popen[str]]:
    """``count`` `txqueue worker` processes on tests/integration/apps.py; stderr is kept."""
    argv = [*TXQUEUE, "worker", "--app", "tests.integration.apps:registry", *flags]
    return [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]


def recorded_runs(folder: Path) -> Counter[str]:
    """How many times each task id ran, from the ``record`` task's files in ``folder``."""
    return Counter(
        line.split()[0] for f in folder.glob("*.log") for line in f.read_text().splitlines()
    )


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_init_is_idempotent(services: tuple[str, str], db_url: str) -> None:
    drop_schema(db_url)
    first = cli("init", "--database-url", db_url)
    assert first.returncode == 0, first.stderr
    assert "applied migrations 1 to " in first.stdout, first.stdout
    second = cli("init", env={"TXQUEUE_DATABASE_URL": db_url})
    assert second.returncode == 0 and "already up to date" in second.stdout
    assert count(db_url) == 0


def test_a_worker_without_the_tables_says_to_run_init_in_one_line(db_url: str) -> None:
    drop_schema(db_url)
    run = cli("worker", "--app", "tests.integration.apps:registry", "--database-url", db_url)
    line = one_line_error(run, "the txqueue tables do not exist; run `txqueue init` first")
    assert line.startswith("txqueue: error: worker: ")


def test_enqueue_with_app_takes_the_registered_queue_and_checks_the_arguments(
    db_url: str,
) -> None:
    app = ["--app", "tests.integration.apps:registry", "--database-url", db_url]
    enqueued = cli("enqueue", "greet", "--payload", '{"name": "ann", "times": 2}', *app)
    assert enqueued.returncode == 0, enqueued.stderr
    moved = cli("enqueue", "greet", "--payload", '{"name": "bo"}', "--queue", "other", *app)
    assert moved.returncode == 0, moved.stderr
    # max_attempts stays unset: the registry's applies when a worker claims it.
    assert [(r["queue"], r["max_attempts"], r["payload"]) for r in rows(db_url)] == [
        ("typed_cli", None, {"name": "ann", "times": 2}),
        ("other", None, {"name": "bo"}),
    ]
    one_line_error(cli("enqueue", "greet", "--payload", '{"name": 7}', *app), "name", "str")
    one_line_error(cli("enqueue", "greet", *app), "name: is missing")
    unknown = cli("enqueue", "greet", "--payload", '{"name": "x", "nom": 1}', *app)
    one_line_error(unknown, "nom: is not an argument")
    one_line_error(cli("enqueue", "nope", *app), "registers no task 'nope'")
    assert len(rows(db_url)) == 2  # nothing written for the refused ones


def test_enqueue_worker_status_end_to_end(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    env = {
        "TXQUEUE_DATABASE_URL": db_url,
        "TXQUEUE_AMQP_URL": amqp_url,
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    enqueued = cli("enqueue", "record", "--payload", '{"order": 42}', "--queue", queue, env=env)
    assert enqueued.returncode == 0, enqueued.stderr
    task_id = enqueued.stdout.strip()
    worker = subprocess.Popen(
        [*TXQUEUE, "worker", "--app", "tests.integration.apps:registry", "--concurrency", "2"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=20)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    assert "SIGTERM" in output and "Traceback" not in output
    [row] = rows(db_url)
    assert str(row["id"]) == task_id and row["payload"] == {"order": 42}
    status = cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    [entry] = json.loads(status.stdout)["queues"]
    assert entry["queue"] == queue and entry["succeeded"] == 1 and entry["pending"] == 0
    table = cli("status", env=env)
    assert queue in table.stdout


def test_without_rabbitmq_a_worker_says_how_it_is_woken_and_so_does_status(
    db_url: str, queue: str, tmp_path: Path
) -> None:
    env = {
        "TXQUEUE_DATABASE_URL": db_url,
        "TXQUEUE_AMQP_URL": "",
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    notify = db_url.startswith("postgresql:")
    [worker] = app_workers(1, {**os.environ, **env}, "--poll-interval", "30" if notify else "0.1")
    try:
        if notify:  # its listener up, and its first poll done
            wait_until(lambda: listeners(db_url) == 1, timeout=20)
            time.sleep(0.3)
        enqueued = cli("enqueue", "record", "--queue", queue, env=env)
        assert enqueued.returncode == 0, enqueued.stderr
        committed = time.monotonic()
        # Long before the next poll on PostgreSQL: woken by the enqueue's NOTIFY.
        wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=20)
        assert time.monotonic() - committed < (5 if notify else 20)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, output = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    said = "woken by PostgreSQL NOTIFY" if notify else "polling every 0.1s, woken at once"
    assert said in output, output
    status = cli("status", "--json", env=env)
    assert json.loads(status.stdout)["wakeups"] == ("notify" if notify else "none")
    table = cli("status", env=env).stdout
    assert ("wake-ups: PostgreSQL NOTIFY" if notify else "wake-ups: none") in table


def listeners(db_url: str) -> int:
    """Backends listening for wake-ups on the test's database."""
    name = db_url.rsplit("/", 1)[1]
    return execute(
        db_url,
        "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN txqueue_wak%%'",
        (name,),
    )


def test_eight_worker_processes_never_claim_a_task_twice(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    total = 5000
    env = {
        **os.environ,
        "TXQUEUE_DATABASE_URL": db_url,
        "TXQUEUE_AMQP_URL": amqp_url,
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    workers = app_workers(8, env, "--concurrency", "4", "--poll-interval", "0.05")
    try:
        # Every worker ready first: one alone would drain a good part before the others start.
        wait_until(lambda: consumers(amqp_url, queue) == len(workers), timeout=60, every=0.2)
        with closing(connect(db_url)) as c:
            # Wake-ups and polls compete for the same rows: half the tasks come in small
            # transactions, half in one batch.
            for start in range(0, total // 2, 50):
                with txqueue.transaction(c):
                    txqueue.enqueue_many(
                        c, [Task("record", {"i": i}, queue=queue) for i in range(start, start + 50)]
                    )
            with txqueue.transaction(c):
                txqueue.enqueue_many(
                    c, [Task("record", {"i": i}, queue=queue) for i in range(total // 2, total)]
                )
        wait_until(lambda: count(db_url, "state = 'succeeded'") == total, timeout=120, every=0.2)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.communicate(timeout=30)
    runs = recorded_runs(tmp_path)
    assert len(runs) == total and set(runs.values()) == {1}
    assert count(db_url, "attempts = 1") == total
    assert len(list(tmp_path.glob("*.log"))) > 1  # the work really was shared
    assert all(w.returncode == 0 for w in workers)


@pytest.mark.parametrize("command", [["init"], ["status"], ["enqueue", "x"]])
def test_unreachable_database_is_one_line_without_password(command: list[str]) -> None:
    url = "postgresql://alice:hunter2@127.0.0.1:1/app"
    result = cli(*command, "--database-url", url)
    line = one_line_error(result, "cannot connect to PostgreSQL", "alice:***@127.0.0.1:1")
    assert "hunter2" not in result.stderr + result.stdout
    assert line.startswith("txqueue: error:")


@pytest.mark.parametrize("command", [["init"], ["status"], ["status", "--json"]])
def test_an_unreachable_broker_is_a_warning_where_the_database_is_enough(
    db_url: str, command: list[str]
) -> None:
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("x", queue="shown"))
    broker = "amqp://bob:s3cret@127.0.0.1:1/"
    result = cli(*command, "--database-url", db_url, "--amqp-url", broker)
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(
        "txqueue: warning: cannot connect to RabbitMQ at amqp://bob:***@127.0.0.1:1/"
    )
    assert "Connection refused" in line
    assert "s3cret" not in result.stderr + result.stdout
    if command == ["init"]:
        assert "schema" in result.stdout
    elif "--json" in command:
        doc = json.loads(result.stdout)
        assert doc["queues"][0]["pending"] == 1 and "RabbitMQ" in doc["broker_error"]
    else:
        assert "shown" in result.stdout


@RABBITMQ
def test_a_rabbitmq_login_refused_is_an_error_where_an_outage_is_a_warning(
    db_url: str, services: tuple[str, str]
) -> None:
    """A wrong user or password is no outage: retrying cannot mend it, so init, status and
    a worker fail in one line naming the fix; an enqueue, which never waits on the broker,
    says it once and commits."""
    node = urlsplit(services[1])
    wrong = node._replace(netloc=f"{node.username}:wrong-pw@{node.netloc.rpartition('@')[2]}")
    env = {"TXQUEUE_DATABASE_URL": db_url, "TXQUEUE_AMQP_URL": wrong.geturl()}
    fix = ("refused the login", "check the user and password in the AMQP URL", ":***@")
    for command in (["init"], ["status"], ["status", "--json"]):
        one_line_error(cli(*command, env=env), *fix)
    started = time.monotonic()
    worker = cli("worker", "--app", "tests.integration.apps:registry", env=env, timeout=30)
    assert worker.returncode == 1, worker.stderr
    assert time.monotonic() - started < 15
    last = worker.stderr.strip().splitlines()[-1]
    assert last.startswith("txqueue: error: worker ") and all(n in last for n in fix), last
    enqueued = cli("enqueue", "record", "--app", "tests.integration.apps:registry", env=env)
    assert enqueued.returncode == 0 and count(db_url, "state = 'pending'") == 1
    said = [line for line in enqueued.stderr.splitlines() if "refused the login" in line]
    assert len(said) == 1 and all(n in said[0] for n in fix), enqueued.stderr
    for result in (worker, enqueued):
        assert "wrong-pw" not in result.stdout + result.stderr
        assert "Traceback" not in result.stdout + result.stderr


def test_a_worker_refused_by_the_database_for_good_stops_at_once(pg_url: str) -> None:
    """No such database, or a wrong password: retrying cannot help, so it fails fast."""
    for url in (
        pg_url.rsplit("/", 1)[0] + "/txqueue_no_such_db",
        pg_url.replace("//postgres@", "//nobody@"),
    ):
        started = time.monotonic()
        result = cli("worker", "--app", "tests.integration.apps:registry", "--database-url", url)
        one_line_error(result, "cannot connect to PostgreSQL")
        assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--database-url", "mysql://x@h/db"], "unsupported database URL scheme"),
        (["--database-url", "postgresql://h:notaport/db"], "malformed database URL"),
        (["--database-url", "sqlite:///:memory:"], "SQLite URL must name a file"),
        (["--amqp-url", "http://broker/"], "AMQP URL must look like"),
    ],
)
def test_bad_urls(db_url: str, args: list[str], needle: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    one_line_error(
        cli("worker", "--app", "tests.integration.apps:registry", *args, env=env), needle
    )


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no_such_module:registry", "cannot import 'no_such_module'"),
        ("tests.integration.apps:missing", "is not a txqueue.Registry"),
        ("tests.integration.apps:not_a_registry", "is not a txqueue.Registry"),
        ("justamodule", "must look like module:registry"),
    ],
)
def test_unknown_app(db_url: str, spec: str, needle: str) -> None:
    one_line_error(cli("worker", "--app", spec, "--database-url", db_url), needle)


def test_a_sqlite_file_in_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/x.db"
    for command in ("init", "status"):
        one_line_error(
            cli(command, "--database-url", url), f"its directory '{tmp_path}/no/such/dir'"
        )
    assert not (tmp_path / "no").exists()


def test_payloads_too_large_for_a_command_line_come_from_a_file_or_stdin(
    db_url: str, tmp_path: Path
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    big = {"lines": ["x" * 100] * 3000}  # 300 kB: over Linux's 128 kB per argument
    (tmp_path / "big.json").write_text(json.dumps(big))
    from_file = cli("enqueue", "x", "--payload", f"@{tmp_path / 'big.json'}", env=env)
    from_stdin = cli("enqueue", "x", "--payload", "-", env=env, stdin=json.dumps(big))
    assert from_file.returncode == 0 and from_stdin.returncode == 0, from_file.stderr
    assert [r["payload"] for r in rows(db_url)] == [big, big]

    one_line_error(
        cli("enqueue", "x", "--payload", f"@{tmp_path / 'nope.json'}", env=env),
        f"--payload @{tmp_path / 'nope.json'}: cannot read it",
        "No such file",
    )
    one_line_error(
        cli("enqueue", "x", "--payload", "-", env=env, stdin="{oops"),
        "--payload - (stdin) is not valid JSON",
    )
    assert count(db_url) == 2


def test_listings_keep_every_value_whole_when_piped_and_at_80_columns(
    db_url: str, queue: str
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    name = "send_the_quarterly_report_to_every_subscriber"
    long_queue = queue + "_transactional_emails"
    task_id = cli("enqueue", name, "--queue", long_queue, env=env).stdout.strip()
    terminal = {**env, "COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}

    piped = {c: cli(*c.split(), env=env).stdout for c in ("list", "status", f"show {task_id}")}
    [row] = [line for line in piped["list"].splitlines() if line.startswith(task_id)]
    assert row.split() == [task_id, long_queue, name, "pending", "0"]
    assert [long_queue, "1", "0", "0", "0", "0"] == piped["status"].splitlines()[1].split()[:6]
    assert f"name              {name}" in piped[f"show {task_id}"]
    # Options the task takes from its registration are said to be, not shown as missing.
    assert "timeout           the registry's" in piped[f"show {task_id}"]
    for text in piped.values():
        assert "…" not in text and "│" not in text and "\x1b" not in text

    for command in ("list", "status", f"show {task_id}"):
        shown = re.sub("\x1b\\[[0-9;]*m", "", cli(*command.split(), env=terminal).stdout)
        assert "…" not in shown, shown
        assert max(len(line) for line in shown.splitlines()) <= 80, shown
        assert "pending" in shown.split(), shown  # a state is never folded
    assert task_id in cli("list", env=terminal).stdout  # nor an id


def test_status_names_pending_tasks_no_running_worker_has_a_handler_for(
    db_url: str, queue: str
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    for name in ("known", "orphan", "orphan"):
        assert cli("enqueue", name, "--queue", queue, "--delay", "3600", env=env).returncode == 0
    before = json.loads(cli("status", "--json", env=env).stdout)
    assert before["workers"] == 0
    assert "no worker running" in cli("status", env=env).stdout

    registry = txqueue.Registry()
    registry.task("known", queue=queue)(lambda payload: None)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None)
    with running(worker):
        wait_until(lambda: json.loads(cli("status", "--json", env=env).stdout)["workers"] == 1)
        doc = json.loads(cli("status", "--json", env=env).stdout)
        text = cli("status", env=env).stdout
    assert doc["no_handler"] == [{"queue": queue, "name": "orphan", "pending": 2}]
    assert "1 worker running" in text and "no running worker has a handler for" in text
    assert [queue, "orphan", "2"] in [line.split() for line in text.splitlines()]
    after = json.loads(cli("status", "--json", env=env).stdout)
    assert after["workers"] == 0  # a worker that stops deletes its row


def test_with_nothing_configured_the_database_is_txqueue_db_here(tmp_path: Path) -> None:
    one_line_error(cli("status", cwd=tmp_path), "no SQLite database at 'txqueue.db'", "init")
    assert not (tmp_path / "txqueue.db").exists()  # a typo'd path is not a new database
    assert cli("init", cwd=tmp_path).returncode == 0
    assert cli("enqueue", "x", cwd=tmp_path).returncode == 0
    assert "pending" in cli("status", cwd=tmp_path).stdout
    assert count(f"sqlite:///{tmp_path}/txqueue.db") == 1


def worker_seen(db_url: str, queues: list[str], names: list[str]) -> None:
    """A live worker's presence row, as a running worker of these queues and names keeps."""
    store = for_url(db_url)
    with closing(store.connect(db_url)) as conn:
        store.worker_seen(conn, "w1", queues, names)


def test_enqueue_without_app_warns_when_no_live_worker_handles_the_task(db_url: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    alone = cli("enqueue", "no_such_task", "--payload", '{"a": 1}', env=env)
    assert alone.returncode == 0 and alone.stdout.strip(), alone.stderr
    assert alone.stderr.strip() == (
        "txqueue: warning: no running worker handles task 'no_such_task' (none has reported "
        "in): it waits on queue 'default' until one does; --app module:registry checks the name"
    )
    worker_seen(db_url, ["default"], ["send_email", "report"])
    typo = cli("enqueue", "send_emial", env=env)
    assert typo.returncode == 0 and typo.stdout.strip(), typo.stderr
    assert typo.stderr.strip() == (
        "txqueue: warning: no running worker handles task 'send_emial' (did you mean "
        "'send_email'?): it waits on queue 'default'; --app module:registry checks the name"
    )
    elsewhere = cli("enqueue", "report", "--queue", "other", env=env)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert elsewhere.stderr.strip() == (
        "txqueue: warning: the running workers handle task 'report' on queue 'default', not "
        "'other': pass --queue, or --app module:registry for the task's own"
    )
    handled = cli("enqueue", "report", env=env)
    assert handled.returncode == 0 and handled.stderr == ""
    assert count(db_url, "state = 'pending'") == 4  # a warning, never a refusal


def test_enqueue_bad_input_writes_nothing(db_url: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    one_line_error(
        cli("enqueue", "x", "--payload", "{oops", env=env), "--payload is not valid JSON"
    )
    one_line_error(cli("enqueue", "x", "--queue", "bad queue!", env=env), "queue:")
    one_line_error(cli("enqueue", " ", env=env), "name: must not be empty")
    assert count(db_url) == 0


def test_enqueue_without_broker_still_commits(db_url: str) -> None:
    started = time.monotonic()
    result = cli(
        "enqueue",
        "x",
        env={"TXQUEUE_DATABASE_URL": db_url, "TXQUEUE_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/"},
    )
    assert result.returncode == 0, result.stderr
    assert "warning: wake-up not confirmed" in result.stderr
    assert time.monotonic() - started < 10
    assert count(db_url, "state = 'pending'") == 1


@pytest.mark.parametrize(
    ("database_down", "broker_down"),
    [(True, False), (True, True), (False, True)],
    ids=["database", "database-and-broker", "broker"],
)
def test_a_worker_with_nothing_in_hand_stops_within_a_second_whatever_is_down(
    pg_url: str, database_down: bool, broker_down: bool
) -> None:
    """No task, no outcome, nothing to release: nothing to wait for, although the shutdown
    timeout (30 s by default) would allow it."""
    database = "postgresql://nobody@127.0.0.1:1/nope" if database_down else pg_url
    broker = ["--amqp-url", "amqp://guest:guest@127.0.0.1:1/"] if broker_down else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    app = "tests.integration.apps:registry"
    worker = subprocess.Popen(
        [*TXQUEUE, "worker", "--app", app, "--database-url", database, *broker],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            lines.append(line)
            if " on queues " in line:  # its start line: its signal handlers are in place
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # Started (a loaded machine takes seconds to import), and failing to reach what is down.
        assert started.wait(60), "".join(lines)
        time.sleep(1)
        worker.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        worker.wait(60)
    finally:
        worker.kill()
    took = time.monotonic() - sent
    reader.join(10)
    assert worker.stdout is not None
    worker.stdout.close()
    output = "".join(lines)
    assert took < 1, f"took {took:.1f}s to stop: {output}"
    assert worker.returncode == 0, output
    assert "SIGTERM" in output and "Traceback" not in output
    assert re.search(r"txqueue.worker: worker \S+ stopped: ", output.splitlines()[-1]), output


def _worker_with_sleeping_task(
    db_url: str, queue: str, tmp_path: Path, seconds: float
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "TXQUEUE_DATABASE_URL": db_url,
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    env.pop("TXQUEUE_AMQP_URL", None)
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("sleep", {"seconds": seconds}, queue=queue))
    worker = subprocess.Popen(
        [*TXQUEUE, "worker", "--app", "tests.integration.apps:registry"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_until(lambda: (tmp_path / "sleep.started").exists(), timeout=20)
    return worker


def _read_until(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    """What ``proc`` printed, up to the line that holds ``text``."""
    stdout = proc.stdout
    assert stdout is not None
    lines: list[str] = []

    def read() -> None:
        for line in stdout:
            lines.append(line)
            if text in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert not reader.is_alive(), f"no {text!r} within {timeout}s: {''.join(lines)}"
    return "".join(lines)


def test_first_signal_lets_the_running_task_finish(db_url: str, queue: str, tmp_path: Path) -> None:
    worker = _worker_with_sleeping_task(db_url, queue, tmp_path, 1.5)
    worker.send_signal(signal.SIGTERM)
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    [row] = rows(db_url)
    assert row["state"] == "succeeded" and row["result"] == "slept"


def test_second_signal_stops_at_once(db_url: str, queue: str, tmp_path: Path) -> None:
    worker = _worker_with_sleeping_task(db_url, queue, tmp_path, 60)
    worker.send_signal(signal.SIGINT)
    # Only once the first was heard: a signal still pending when the same one comes again
    # is delivered once (POSIX), as a process not scheduled for a while on a loaded machine
    # would have it.
    heard = _read_until(worker, "finishing the work in hand", timeout=30)
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGINT)
    rest, _ = worker.communicate(timeout=30)
    output = heard + rest
    assert time.monotonic() - stopped_at < 5
    assert worker.returncode == 3, output  # stopped with work not done
    assert "again: stopping now" in output and "Traceback" not in output
    [row] = rows(db_url)
    # Released at once, not left to its 5-minute lease: the handler was cut off mid-run.
    assert row["state"] == "pending" and row["attempts"] == 1
    assert row["errors"][-1]["type"] == "txqueue.WorkerStopped"
    assert "released 1 unfinished tasks" in output


def test_task_management_commands(db_url: str, queue: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    enqueued = cli("enqueue", "record", "--queue", queue, "--delay", "3600", env=env)
    task_id = enqueued.stdout.strip()

    cancelled = cli("cancel", task_id, env=env)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
    one_line_error(cli("cancel", task_id, env=env), "already finished", "cancelled")
    listed = json.loads(cli("list", "--state", "cancelled", "--json", env=env).stdout)
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    assert task_id in cli("list", "--queue", queue, env=env).stdout

    retried = cli("retry", task_id, "--json", env=env)
    assert json.loads(retried.stdout) == {"action": "retry", "changed": 1}, retried.stderr
    shown = json.loads(cli("show", task_id, "--json", env=env).stdout)
    assert shown["state"] == "pending" and shown["queue"] == queue
    assert "run_at" in cli("show", task_id, env=env).stdout
    none_failed = json.loads(cli("retry", "--failed", "--json", env=env).stdout)
    assert none_failed == {"action": "retry", "changed": 0}

    one_line_error(cli("show", "8d7b1d2e-0000-4000-8000-000000000000", env=env), "no task")
    one_line_error(cli("show", "42", env=env), "id: '42' is not a task id")
    one_line_error(cli("retry", env=env), "give a task id, or --failed")
    one_line_error(cli("list", "--state", "done", env=env), "state: must be one of")


def test_enqueue_says_when_a_unique_key_had_it_queued_already(db_url: str, queue: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    worker_seen(db_url, [queue], ["record", "sleep"])  # no warning that none handles them
    args = ("enqueue", "record", "--queue", queue, "--unique-key", "k", "--delay", "60")
    first, again = cli(*args, env=env), cli(*args, env=env)
    assert first.returncode == again.returncode == 0, again.stderr
    assert first.stdout == again.stdout and first.stderr == ""
    assert again.stderr.strip() == (
        f"txqueue: already queued as {first.stdout.strip()}: that live task holds the "
        "unique key 'k'; nothing new was enqueued"
    )
    other = cli("enqueue", "sleep", "--queue", queue, "--unique-key", "k", env=env)
    one_line_error(other, "unique_key: 'k' is held by the live task record", "not a sleep")


def test_show_cuts_a_long_payload_short_unless_told_full(db_url: str, queue: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    payload = json.dumps({"blob": "x" * 5000})
    task_id = cli("enqueue", "record", "--queue", queue, "--payload", payload, env=env).stdout
    cut = cli("show", task_id.strip(), env=env)
    assert cut.returncode == 0, cut.stderr
    assert "(3,012 more characters: --full for all)" in cut.stdout
    assert "x" * 5000 not in cut.stdout.replace("\n", "")
    whole = cli("show", task_id.strip(), "--full", env=env, timeout=60)
    assert "x" * 5000 in "".join(line.strip() for line in whole.stdout.splitlines())


def test_show_and_history_tell_who_changed_a_task_and_when(db_url: str, queue: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    task_id = cli("enqueue", "record", "--queue", queue, env=env).stdout.strip()
    assert cli("cancel", task_id, env=env).returncode == 0
    shown = cli("show", task_id, env=env)
    assert shown.returncode == 0, shown.stderr
    timeline = shown.stdout[shown.stdout.index("history") :]
    assert "cancel" in timeline and "pending → cancelled" in timeline and "cli" in timeline

    found = cli("history", "--queue", queue, "--json", env=env)
    assert found.returncode == 0, found.stderr
    [event] = json.loads(found.stdout)["events"]
    assert (event["task_id"], event["move"], event["from"], event["to"]) == (
        task_id,
        "cancel",
        "pending",
        "cancelled",
    )
    assert event["by"].startswith("cli")
    assert cli("history", "--queue", queue, "--state", "failed", env=env).stdout.startswith(
        "no events since 1h ago"
    )
    one_line_error(cli("history", "--since", "soon", env=env), "--since", "24h")
    one_line_error(cli("history", "--state", "done", env=env), "state: must be one of")


def test_workflow_show_draws_each_step_and_cancel_ends_what_is_left(
    db_url: str, queue: str
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    flow = txqueue.Workflow("nightly")
    first = flow.add(txqueue.Task("record", {"n": 1}, queue=queue), name="extract")
    flow.add(txqueue.Task("record", {"n": 2}, queue=queue), after=[first], name="load")
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_workflow(c, flow)

    shown = cli("workflow", "show", str(flow.id), env=env)
    assert shown.returncode == 0, shown.stderr
    assert "nightly" in shown.stdout and "running" in shown.stdout
    [load] = [line for line in shown.stdout.splitlines() if line.startswith("load")]
    assert "waiting" in load and "extract" in load  # after extract
    assert cli("workflow", "cancel", str(flow.id), env=env).stdout.startswith(
        f"workflow {flow.id}: 2 steps cancelled"
    )
    doc = json.loads(cli("workflow", "show", str(flow.id), "--json", env=env).stdout)
    assert doc["state"] == "cancelled"
    assert [(s["step"], s["state"], s["move"]) for s in doc["steps"]] == [
        ("extract", "cancelled", "cancel"),
        ("load", "cancelled", "cancel"),
    ]
    one_line_error(cli("workflow", "show", str(first.id), env=env), "no workflow")
    one_line_error(cli("workflow", "show", "nope", env=env), "not a task id")


def test_workflow_list_pages_and_filters_and_names_a_bad_option_in_one_line(
    db_url: str, queue: str
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    flows = [txqueue.Workflow(name) for name in ("nightly", "hourly", "nightly")]
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        for flow in flows:
            first = flow.add(txqueue.Task("record", queue=queue), name="extract")
            flow.add(txqueue.Task("record", queue=queue), after=[first], name="load")
            txqueue.enqueue_workflow(c, flow)
    with closing(connect(db_url)) as c:
        txqueue.cancel_workflow(c, flows[0].id)
        c.commit()
    newest = [str(f.id) for f in reversed(flows)]

    page = json.loads(cli("workflow", "list", "--limit", "2", "--json", env=env).stdout)
    assert [w["id"] for w in page["workflows"]] == newest[:2]
    assert page["next_before"] == newest[1]
    assert page["workflows"][0]["steps"] == {
        "pending": 1,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
        "waiting": 1,
        "parked": 0,
    }
    rest = cli("workflow", "list", "--before", page["next_before"], "--json", env=env)
    [cancelled] = json.loads(rest.stdout)["workflows"]
    assert json.loads(rest.stdout)["next_before"] is None
    assert (cancelled["id"], cancelled["state"]) == (newest[2], "cancelled")
    assert cancelled["finished_at"] is not None
    shown = cli("workflow", "list", "--name", "nightly", "--state", "cancelled,failed", env=env)
    assert shown.returncode == 0, shown.stderr
    [header, line] = shown.stdout.splitlines()
    assert header.split() == ["id", "name", "state", "steps", "created_at", "finished_at"]
    assert line.startswith(f"{flows[0].id}  nightly  cancelled  2 cancelled  ")
    assert cli("workflow", "list", "--created-before", "1d", env=env).stdout == (
        "no workflows match\n"
    )
    more = cli("workflow", "list", "--state", "running", "--limit", "2", env=env).stdout
    assert more.splitlines()[-1] == f"more: --before {newest[1]}"
    one_line_error(cli("workflow", "list", "--state", "waiting", env=env), "state: must be one of")
    one_line_error(cli("workflow", "list", "--before", "nope", env=env), "before: must be a")
    one_line_error(cli("workflow", "list", "--created-after", "soon", env=env), "--created-after")
    bad_limit = cli("workflow", "list", "--limit", "0", env=env)
    assert bad_limit.returncode == 2 and "--limit" in bad_limit.stderr
    assert "Traceback" not in bad_limit.stderr


def test_cleaner_once_reports_and_fails_only_when_it_cannot_work(db_url: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    ran = cli("cleaner", "--once", "--json", "--retain", "1h", env=env)
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["ok"] and report["retried"] == 0 and report["pruned"] == 0
    assert cli("cleaner", env=env).stdout.startswith("cleaner: re-notified 0, recovered 0")
    one_line_error(cli("cleaner", "--retain", "soon", env=env), "--retain", "24h")
    down = cli(
        "cleaner", "--database-url", "postgresql://app:s3cret@127.0.0.1:1/db", env={}, timeout=30
    )
    line = one_line_error(down, "cannot connect to PostgreSQL")
    assert "s3cret" not in line
    unconfirmed = cli("cleaner", "--amqp-url", "amqp://guest:guest@127.0.0.1:1/", env=env)
    assert unconfirmed.returncode == 0  # nothing to re-send: nothing it could not do


def test_cleaner_loop_runs_until_signalled(db_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    env["TXQUEUE_DATABASE_URL"] = db_url
    loop = subprocess.Popen(
        [*TXQUEUE, "cleaner", "--loop", "--interval", "0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert loop.stdout is not None
    seen = []
    for line in loop.stdout:  # signalled after three passes, however slow its start-up
        seen.append(line)
        if sum("cleaner: re-notified 0, recovered 0" in s for s in seen) == 3:
            break
    loop.send_signal(signal.SIGTERM)
    rest, _ = loop.communicate(timeout=20)
    output = "".join(seen) + rest
    assert loop.returncode == 0, output
    assert output.count("cleaner: re-notified 0, recovered 0") >= 3, output
    assert "Traceback" not in output


def test_demo_with_nothing_configured_runs_to_its_summary(tmp_path: Path) -> None:
    result = cli("demo", "--tasks", "400", cwd=tmp_path, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "SQLite, throwaway file" in out and "in-process (no broker)" in out
    assert re.search(r"tasks committed +│ 400 ", out) and re.search(r"run twice +│ 0 ", out)
    assert "never ran, no row" in out and re.search(r"started early +│ 0 of", out)
    assert "Traceback" not in out + result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_demo_piped_prints_lines_and_its_summary_on_a_line_of_its_own(tmp_path: Path) -> None:
    result = cli("demo", "--tasks", "200", cwd=tmp_path, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    # No live view's redraws in a pipe: they ran into the summary table's title.
    assert "\r" not in result.stdout and "\x1b" not in result.stdout, result.stdout
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert "summary" in lines, result.stdout
    # Before it, a line as each phase the run saw begins.
    phases = lines[: lines.index("summary")]
    assert phases and all(re.fullmatch(r"\d+\.\d s  .+ \d+/200 done", p) for p in phases), phases


def test_demo_verbose_logs_as_it_runs(tmp_path: Path) -> None:
    result = cli("demo", "--tasks", "100", "--verbose", cwd=tmp_path, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"tasks committed +│ 100 ", result.stdout), result.stdout
    assert "txqueue" in result.stderr  # the log lines
    assert "Traceback" not in result.stdout + result.stderr


def test_demo_on_postgresql_and_rabbitmq_cleans_up(pg_url: str, amqp_url: str) -> None:
    result = cli("demo", "--tasks", "400", "--database-url", pg_url, "--amqp-url", amqp_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "guest:***@127.0.0.1" in result.stdout and "never ran, no row" in result.stdout
    assert count(pg_url) == 0
    assert broker.check(amqp_url, ["txqueue-demo"]) == {"txqueue-demo": None}


def test_demo_on_postgresql_alone_is_woken_by_notify(pg_url: str) -> None:
    drop_schema(pg_url)  # a database txqueue was never in: the demo says what it leaves
    env = {"TXQUEUE_AMQP_URL": "", "COLUMNS": "200"}
    for made in (True, False):
        result = cli("demo", "--tasks", "200", "--database-url", pg_url, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        [line] = [line for line in result.stdout.splitlines() if "wake-ups" in line]
        assert "PostgreSQL NOTIFY" in line, result.stdout
        assert "never ran, no row" in result.stdout and count(pg_url) == 0
        said = "txqueue's tables made there, as txqueue init does; they stay"
        assert (said in result.stdout) is made, result.stdout


def test_schedule_lists_the_periodic_tasks_with_their_last_and_next_runs(
    db_url: str, queue: str
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    assert "no periodic tasks" in cli("schedule", env=env).stdout
    registry = txqueue.Registry()

    @registry.periodic("0 */2 * * *", queue=queue, timezone="Asia/Kolkata")
    def every_other_hour(payload: Any) -> None: ...

    with running(txqueue.Worker(registry, database_url=db_url, amqp_url=None)):
        wait_until(lambda: bool(json.loads(cli("schedule", "--json", env=env).stdout)["schedules"]))
    [entry] = json.loads(cli("schedule", "--json", env=env).stdout)["schedules"]
    last, upcoming = (datetime.fromisoformat(entry[k]) for k in ("last_run", "next_run"))
    assert (upcoming - last).total_seconds() == 7200
    assert (upcoming.minute, upcoming.astimezone(ZoneInfo("Asia/Kolkata")).minute) == (30, 0)
    assert {k: entry[k] for k in ("name", "task", "queue", "cron", "timezone", "missed")} == {
        "name": "every_other_hour",
        "task": "every_other_hour",
        "queue": queue,
        "cron": "0 */2 * * *",
        "timezone": "Asia/Kolkata",
        "missed": False,
    }
    execute(db_url, f"UPDATE txqueue_schedules SET last_slot = {ago(db_url, 3 * 3600)}")
    shown = cli("schedule", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "every_other_hour" in shown.stdout and "(missed: no worker ran)" in shown.stdout


def test_schedule_commands_create_change_pause_resume_and_delete_a_schedule(
    db_url: str, tmp_path: Path
) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}

    def run(*args: str) -> Any:
        result = cli("schedule", *args, "--json", env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    (tmp_path / "args.json").write_text('{"kind": "daily"}')
    made = run(
        "create",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--task",
        "report",
        "--payload",
        f"@{tmp_path / 'args.json'}",
        "--timezone",
        "Europe/Paris",
    )
    assert {k: made[k] for k in ("source", "task", "queue", "payload", "paused")} == {
        "source": "runtime",
        "task": "report",
        "queue": "default",
        "payload": {"kind": "daily"},
        "paused": False,
    }
    changed = run("change", "nightly", "--queue", "reports", "--catch-up")
    assert (changed["queue"], changed["catch_up"], changed["cron"]) == (
        "reports",
        True,
        "0 3 * * *",
    )
    assert run("pause", "nightly")["next_run"] is None
    [listed] = run()["schedules"]
    assert (listed["name"], listed["paused"], listed["missed"]) == ("nightly", True, False)
    assert run("resume", "nightly")["next_run"] == made["next_run"]
    shown = cli("schedule", env=env)
    assert "nightly  runtime  report" in shown.stdout, shown.stdout

    for args, message in [
        (("create", "nightly", "--cron", "0 4 * * *", "--task", "x"), "name: a schedule named"),
        (("create", "x", "--cron", "0 3 * *", "--task", "x"), "cron: '0 3 * *'"),
        (("create", "x", "--cron", "0 3 * * *", "--task", "x", "--payload", "{"), "--payload"),
        (("pause", "missing"), "no schedule named 'missing'"),
        (("change", "nightly"), "nothing to change: give --cron"),
        (
            (
                "create",
                "hi",
                "--cron",
                "0 3 * * *",
                "--task",
                "greet",
                "--payload",
                "{}",
                "--app",
                "tests.integration.apps:registry",
            ),
            "payload: ",
        ),
    ]:
        refused = cli("schedule", *args, env=env)
        assert refused.returncode == 1 and refused.stderr.startswith("txqueue: error: ")
        assert message in refused.stderr and "Traceback" not in refused.stderr
    assert cli("schedule", "delete", "nightly", env=env).stdout == "schedule nightly deleted\n"
    assert run() == {"schedules": []}


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_worker_log_records_name_the_task_they_are_about(
    db_url: str, queue: str, log_format: str
) -> None:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        task_id = str(txqueue.enqueue(c, Task("chatty", {"order": 7}, queue=queue)))
    env = {"TXQUEUE_DATABASE_URL": db_url, "TXQUEUE_TEST_QUEUE": queue}
    app = "tests.integration.apps:registry"
    result = cli("worker", "--app", app, "--burst", "--log-format", log_format, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    if log_format == "text":
        about = f"[task chatty {task_id} attempt 1]"
        assert any(line.endswith(f"app.chatty: working on 7 {about}") for line in lines), lines
        assert any("failed for good" in line and line.endswith(about) for line in lines), lines
        return
    entries = [json.loads(line) for line in lines]  # every line is one object
    assert all({"time", "level", "logger", "message", "worker_id"} <= e.keys() for e in entries)
    task = {"task_id": task_id, "task_name": "chatty", "queue": queue, "attempt": 1}
    [mine] = [e for e in entries if e["logger"] == "app.chatty"]
    assert mine["message"] == "working on 7" and mine["level"] == "INFO"
    assert task.items() <= mine.items()
    [failed] = [e for e in entries if "failed for good" in e["message"]]
    assert failed["level"] == "ERROR" and task.items() <= failed.items()
    assert failed["worker_id"] == mine["worker_id"]
    outside = [e for e in entries if "task_id" not in e]
    assert outside, "the worker's own start and stop lines carry no task"
