"""txqueue under database pressure: what a held vacuum horizon, long REPEATABLE READ readers,
overload and bursts do to claim latency. Run by hand, never in CI; it takes a while:

    python benchmarks/pressure.py [--cells hold,rr,overload,burst] [--rate 300]
        [--clean 120] [--hold 1800] [--pressure 300] [--recovery 180]

It starts a PostgreSQL cluster of its own (autovacuum on, as in production, unlike the
shared one of the development machine; pg_stat_statements loaded) in a temporary folder,
and a scratch RabbitMQ vhost on the local broker; both are gone when it ends. Then two
`txqueue worker` processes (--concurrency threads each) and one `txqueue cleaner --loop`,
and producers committing one task per transaction at a fixed rate. Each cell is three
phases, one after the other on the same database: clean, pressure, recovery.

- hold: one session takes a transaction id and stays idle in its transaction (--hold s),
  as an analytics query, a pg_dump or a forgotten psql would;
- rr: --readers sessions, each in REPEATABLE READ transactions of --reader-seconds,
  counting the task table's rows now and then, one after another, staggered;
- overload: 1.5 x the rate offered;
- burst: --burst tasks committed at once (enqueue_many, 1,000 per transaction), then the
  rate as before.

Every --sample seconds it prints a line per minute of the run: the claim latency (commit
to handler start) of the tasks committed in it, p50 and p99; the enqueuing transaction's
p50; tasks started per second; the dead row versions of each txqueue table; and the
statements that took the most of the server's time in it. Before and at the end of each
pressure phase it runs EXPLAIN (ANALYZE, BUFFERS) on the statements that scan (the idle
poll, the cleaner's re-notify and lease-recovery scans) and on a claim by id. At the end,
each phase's ratios to its cell's clean phase. Everything goes to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

import txqueue
from txqueue import Task
from txqueue.store.postgres.claims import FINISHED, transitions_doc
from txqueue.store.postgres.connection import QUERIES, connect_args
from txqueue.store.records import Outcome
from txqueue.store.transitions import ended

ROOT = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/{vhost}"
QUEUE = "pressure"
TABLES = "relname LIKE 'txqueue%%'"

registry = txqueue.Registry()
_out: tuple[int, int] | None = None


@registry.task("pressure.stamp", queue=QUEUE)
def stamp(payload: dict[str, int]) -> None:
    """The handler: the task's index and when it started, one line per task, one file per
    worker process (one write() per line, so threads never interleave)."""
    started = time.time()
    global _out
    if _out is None or _out[0] != os.getpid():
        path = Path(os.environ["PRESSURE_DIR"]) / f"{os.getpid()}.stamps"
        _out = (os.getpid(), os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    os.write(_out[1], f"{payload['i']} {started!r}\n".encode())


# --- the producer's process --------------------------------------------------------------


def produce(args: argparse.Namespace) -> None:
    """One task per transaction at ``--rate`` a second from index ``--first``, until
    ``--seconds`` have passed; each commit's index, when it returned, and how long the
    transaction took, as lines to ``--out``. A burst instead: ``--burst`` tasks committed
    1,000 to a transaction, as fast as it goes."""
    lines: list[str] = []
    with psycopg.connect(os.environ["TXQUEUE_DATABASE_URL"]) as conn, open(args.out, "a") as out:
        index = args.first
        if args.burst:
            for start in range(0, args.burst, 1000):
                batch = range(index + start, index + min(args.burst, start + 1000))
                began = time.time()
                with txqueue.transaction(conn):
                    txqueue.enqueue_many(
                        conn, [Task("pressure.stamp", {"i": i}, queue=QUEUE) for i in batch]
                    )
                done = time.time()
                lines += [f"{i} {done!r} {(done - began) * 1000:.3f}" for i in batch]
        else:
            end = time.monotonic() + args.seconds
            next_at = time.monotonic()
            while next_at < end:
                began = time.time()
                with txqueue.transaction(conn):
                    txqueue.enqueue(conn, Task("pressure.stamp", {"i": index}, queue=QUEUE))
                done = time.time()
                lines.append(f"{index} {done!r} {(done - began) * 1000:.3f}")
                index += 1
                if len(lines) >= 200:
                    out.write("\n".join(lines) + "\n")
                    out.flush()
                    lines = []
                next_at += 1 / args.rate
                time.sleep(max(0.0, next_at - time.monotonic()))
        if lines:
            out.write("\n".join(lines) + "\n")
    if not txqueue.flush(60):
        raise SystemExit("RabbitMQ did not confirm the wake-ups")


# --- the world: a cluster, a vhost, workers ----------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster() -> Iterator[str]:
    """A PostgreSQL cluster of its own, autovacuum on, in a temporary folder; its URL."""
    folder = Path(tempfile.mkdtemp(prefix="txqueue-pressure-"))
    postgres = pwd.getpwnam("postgres")
    os.chown(folder, postgres.pw_uid, postgres.pw_gid)
    data, port = folder / "data", free_port()

    def as_postgres(*argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True)

    try:
        as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            "unix_socket_directories": f"'{folder}'",
            "autovacuum": "on",
            "shared_preload_libraries": "'pg_stat_statements'",
            "pg_stat_statements.track": "all",
            "track_io_timing": "on",
            "max_connections": "200",
            "shared_buffers": "256MB",
            "log_autovacuum_min_duration": "0",
        }
        with open(data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "start"
        )
        try:
            url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("CREATE EXTENSION pg_stat_statements")
            yield url
        finally:
            as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rabbitmqctl(*argv: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *argv], check=True, capture_output=True)


@contextmanager
def vhost() -> Iterator[str]:
    name = f"pressure_{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield AMQP_URL.format(vhost=name)
    finally:
        rabbitmqctl("delete_vhost", name)


@contextmanager
def processes(argvs: list[list[str]], env: dict[str, str], log: Path) -> Iterator[None]:
    """Long-running processes, each in a process group of its own, stopped on the way out."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with log.open("ab") as out:
            for argv in argvs:
                procs.append(
                    subprocess.Popen(
                        argv,
                        env=env,
                        cwd=ROOT,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield
        if any(p.poll() is not None for p in procs):
            raise SystemExit(f"a worker or the cleaner exited: see {log}")
    finally:
        for p in procs:
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# --- the pressures -----------------------------------------------------------------------


@contextmanager
def held_transaction(url: str) -> Iterator[None]:
    """A session idle in a transaction that has taken an id: vacuum may remove no row
    version made since it began."""
    with psycopg.connect(url, application_name="pressure-hold") as conn:
        conn.execute("SELECT pg_current_xact_id()")
        yield
        conn.rollback()


@contextmanager
def rr_readers(url: str, readers: int, seconds: float) -> Iterator[None]:
    """Sessions that read the task table in REPEATABLE READ transactions of ``seconds``
    each, started in turn so that the oldest snapshot is always about ``seconds`` old."""
    stop = threading.Event()

    def read(offset: float) -> None:
        with psycopg.connect(url, application_name="pressure-reader") as conn:
            if stop.wait(offset):
                return
            while not stop.is_set():
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                end = time.monotonic() + seconds
                while not stop.is_set() and time.monotonic() < end:
                    conn.execute("SELECT count(*) FROM txqueue_tasks").fetchone()
                    stop.wait(min(5.0, max(0.0, end - time.monotonic())))
                conn.execute("COMMIT")

    threads = [
        threading.Thread(target=read, args=(i * seconds / readers,), daemon=True)
        for i in range(readers)
    ]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(30)


# --- what is measured --------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    dead: dict[str, int]
    live: dict[str, int]
    statements: dict[str, tuple[str, int, float]]  # queryid: (query, calls, total ms)


def sample(url: str) -> Sample:
    with psycopg.connect(url, autocommit=True) as c:
        tables = c.execute(
            f"SELECT relname, n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE {TABLES}"
        ).fetchall()
        statements = c.execute(
            "SELECT queryid::text, query, calls, total_exec_time FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    return Sample(
        time.time(),
        {r[0]: r[1] for r in tables},
        {r[0]: r[2] for r in tables},
        {q: (text, calls, total) for q, text, calls, total in statements},
    )


def top_statements(a: Sample, b: Sample, n: int = 4) -> list[dict[str, Any]]:
    """The statements that took the most of the server's time between two samples."""
    out: list[dict[str, Any]] = []
    for q, (text, calls, total) in b.statements.items():
        _, calls0, total0 = a.statements.get(q, (text, 0, 0.0))
        if calls > calls0:
            out.append(
                {
                    "query": " ".join(text.split())[:90],
                    "calls": calls - calls0,
                    "ms": round(total - total0, 1),
                    "mean_ms": round((total - total0) / (calls - calls0), 3),
                }
            )
    return sorted(out, key=lambda s: -s["ms"])[:n]


def explain(url: str) -> dict[str, dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) of the statements that scan, and of a claim by id, each
    in a transaction rolled back: their time and the pages they touched."""
    claim = {
        "worker_id": "pressure-explain",
        "names": ["pressure.stamp"],
        "defaults": json.dumps(registry.claim_defaults()),
        "default_timeout": 60.0,
        "default_max_attempts": 3,
    }
    statements: dict[str, tuple[str, Any]] = {
        "idle poll": ("claim_ripe", {**claim, "queue": QUEUE, "limit": 16, "lookahead": 0}),
        "claim by id": ("claim_ids", {**claim, "ids": [uuid.uuid4()]}),
        "outcome": (
            "apply",
            {
                "transitions": transitions_doc([ended(Outcome(uuid.uuid4(), 1, "x", "succeeded"))]),
                "finished": FINISHED,
            },
        ),
        "re-notify scan": ("stale_queues", {"grace": 30.0}),
        "lease recovery": ("lock_expired", {"limit": 500, "default_max_attempts": 3}),
    }
    out: dict[str, dict[str, Any]] = {}
    conninfo, args = connect_args(url, "pressure-explain")
    with psycopg.connect(conninfo, **{**args, "autocommit": False}) as c:
        for label, (name, params) in statements.items():
            if name not in QUERIES:
                continue
            try:
                plan = explain_as_run(c, QUERIES[name], params)
            finally:
                c.rollback()
            top = plan[0]
            out[label] = {
                "ms": round(top["Execution Time"], 3),
                "shared_hit": top["Plan"].get("Shared Hit Blocks", 0),
                "shared_read": top["Plan"].get("Shared Read Blocks", 0),
                "shape": shape(top["Plan"]),
                "plan": top["Plan"],
            }
    return out


def explain_as_run(c: psycopg.Connection[Any], query: str, params: Any) -> Any:
    """EXPLAIN (ANALYZE, BUFFERS) of the plan a worker runs ``query`` with: prepared on a
    connection set up as txqueue's own (a generic plan), executed with ``params``."""
    c.execute(query, params, prepare=True)
    prepared = "SELECT name FROM pg_prepared_statements ORDER BY prepare_time DESC LIMIT 1"
    [[name]] = c.execute(prepared, prepare=False).fetchall()
    # The values in the order psycopg numbered them: named ones by first appearance.
    if isinstance(params, dict):
        names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
        values = [params[n] for n in names]
    else:
        values = list(params)
    marks = ", ".join(["%s"] * len(values))
    sql = f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name} ({marks})"
    [[plan]] = psycopg.ClientCursor(c).execute(sql, values).fetchall()
    return plan


def shape(plan: dict[str, Any]) -> str:
    """A plan's nodes, outermost first, each with the index it reads, if any."""
    node = str(plan["Node Type"]) + (f" {plan['Index Name']}" if "Index Name" in plan else "")
    inner = [shape(p) for p in plan.get("Plans", [])]
    return node + (f"({', '.join(inner)})" if inner else "")


def read_lines(folder: Path, pattern: str) -> list[list[str]]:
    rows = []
    for path in folder.glob(pattern):
        rows += [line.split() for line in path.read_text().splitlines() if line]
    return rows


def pct(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


@dataclass
class Run:
    url: str
    env: dict[str, str]
    folder: Path
    args: argparse.Namespace
    t0: float = field(default_factory=time.time)
    phases: list[dict[str, Any]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    explains: list[dict[str, Any]] = field(default_factory=list)
    next_first: int = 0

    def producers(self, rate: float, seconds: float) -> list[subprocess.Popen[bytes]]:
        n = max(1, math.ceil(rate / self.args.rate_per_producer))
        procs = []
        for _ in range(n):
            first, self.next_first = self.next_first, self.next_first + int(rate * seconds) + 10_000
            procs.append(
                self.produce(
                    "--rate", str(rate / n), "--seconds", str(seconds), "--first", str(first)
                )
            )
        return procs

    def produce(self, *argv: str) -> subprocess.Popen[bytes]:
        out = self.folder / f"commits-{uuid.uuid4().hex[:8]}.txt"
        return subprocess.Popen(
            [sys.executable, __file__, "produce", "--out", str(out), *argv],
            env=self.env,
            cwd=ROOT,
        )

    def phase(self, cell: str, name: str, seconds: float, rate: float) -> None:
        """Producers at ``rate`` for ``seconds``, sampling the database as they go."""
        start = time.time()
        print(
            f"[{self.minute(start):5.1f} min] {cell}: {name},"
            f" {rate:.0f} tasks/s for {seconds:.0f} s",
            flush=True,
        )
        procs = self.producers(rate, seconds)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(self.args.sample, max(0.0, end - time.monotonic())))
            self.samples.append(sample(self.url))
            self.report_sample()
        for p in procs:
            if p.wait() != 0:
                raise SystemExit("a producer failed")
        self.phases.append(
            {"cell": cell, "phase": name, "start": start, "end": time.time(), "rate": rate}
        )

    def minute(self, at: float) -> float:
        return (at - self.t0) / 60

    def report_sample(self) -> None:
        if len(self.samples) < 2:
            return
        a, b = self.samples[-2], self.samples[-1]
        dead = " ".join(
            f"{t.removeprefix('txqueue_')}={n:,}" for t, n in sorted(b.dead.items()) if n
        )
        top = "; ".join(
            f"{s['query'][:40]}… {s['mean_ms']}ms x{s['calls']}" for s in top_statements(a, b, 2)
        )
        print(f"  [{self.minute(b.at):5.1f}] dead: {dead or '0'} | top: {top}", flush=True)

    def explain(self, cell: str, when: str) -> None:
        plans = explain(self.url)
        self.explains.append({"cell": cell, "when": when, "at": time.time(), "plans": plans})
        shown = ", ".join(
            f"{k} {v['ms']}ms/{v['shared_hit'] + v['shared_read']} pages" for k, v in plans.items()
        )
        print(f"  EXPLAIN {when}: {shown}", flush=True)


def run_cell(run: Run, cell: str) -> None:
    a = run.args
    run.phase(cell, "clean", a.clean, a.rate)
    run.explain(cell, "pressure start")
    with ExitStack() as stack:
        rate, seconds = a.rate, a.pressure
        if cell == "hold":
            stack.enter_context(held_transaction(run.url))
            seconds = a.hold
        elif cell == "rr":
            stack.enter_context(rr_readers(run.url, a.readers, a.reader_seconds))
        elif cell == "overload":
            rate = a.rate * 1.5
        elif cell == "burst":
            run.produce("--burst", str(a.burst), "--first", str(run.next_first))
            run.next_first += a.burst + 10_000
        run.phase(cell, "pressure", seconds, rate)
        run.explain(cell, "pressure end")
    run.phase(cell, "recovery", a.recovery, a.rate)


def analyse(run: Run) -> dict[str, Any]:
    """Per minute and per phase: claim latency, enqueue time, throughput, dead rows."""
    commits = {
        int(i): (float(at), float(ms)) for i, at, ms in read_lines(run.folder, "commits-*.txt")
    }
    starts: dict[int, float] = {}
    for i, at in read_lines(run.folder, "*.stamps"):
        starts[int(i)] = min(float(at), starts.get(int(i), math.inf))
    lost = [i for i in commits if i not in starts]

    def window(lo: float, hi: float) -> dict[str, Any]:
        mine = [i for i, (at, _) in commits.items() if lo <= at < hi]
        claim = [(starts[i] - commits[i][0]) * 1000 for i in mine if i in starts]
        began = sum(1 for at in starts.values() if lo <= at < hi)
        return {
            "committed": len(mine),
            "claim_p50": round(pct(claim, 0.5), 2),
            "claim_p99": round(pct(claim, 0.99), 2),
            "enqueue_p50": round(pct([commits[i][1] for i in mine], 0.5), 3),
            "started_per_s": round(began / (hi - lo), 1),
            "offered_per_s": round(len(mine) / (hi - lo), 1),
        }

    minutes = []
    end = max([p["end"] for p in run.phases], default=run.t0)
    for m in range(round((end - run.t0) / 60)):  # a last half minute or less is left out
        lo = run.t0 + 60 * m
        row = {"minute": m, **window(lo, min(lo + 60, end))}
        near = min(run.samples, key=lambda s: abs(s.at - (lo + 60)), default=None)
        row["dead"] = near.dead if near else {}
        before = [s for s in run.samples if s.at <= lo + 1]
        within = [s for s in run.samples if lo < s.at <= lo + 61]
        if before and within:
            row["top"] = top_statements(before[-1], within[-1])
        phase = next((p for p in run.phases if p["start"] <= lo + 30 < p["end"]), None)
        row["phase"] = f"{phase['cell']}/{phase['phase']}" if phase else ""
        minutes.append(row)
    phases = []
    for p in run.phases:
        phases.append({**p, **window(p["start"], p["end"])})
        if p["phase"] == "pressure" and p["end"] - p["start"] >= 600:  # the targets' window
            last = {**p, "phase": "last 5 min", "start": p["end"] - 300}
            phases.append({**last, **window(last["start"], last["end"])})
    for p in phases:
        clean = next(c for c in phases if c["cell"] == p["cell"] and c["phase"] == "clean")
        p["ratio"] = {
            k: round(p[k] / clean[k], 2) if clean[k] else None
            for k in ("claim_p50", "claim_p99", "enqueue_p50", "started_per_s")
        }
    return {"minutes": minutes, "phases": phases, "not_started": len(lost)}


def print_report(result: dict[str, Any]) -> None:
    print(
        f"\n{'min':>4} {'phase':18} {'offered/s':>9} {'started/s':>9} {'claim p50':>9}"
        f" {'p99 ms':>8} {'enq p50':>8}  dead row versions"
    )
    for m in result["minutes"]:
        dead = " ".join(
            f"{t.removeprefix('txqueue_')}={n:,}" for t, n in sorted(m["dead"].items()) if n
        )
        print(
            f"{m['minute']:>4} {m['phase']:18} {m['offered_per_s']:>9} {m['started_per_s']:>9}"
            f" {m['claim_p50']:>9} {m['claim_p99']:>8} {m['enqueue_p50']:>8}  {dead}"
        )
    print(
        f"\n{'phase':20} {'claim p50':>9} {'p99':>8} {'enq p50':>8} {'started/s':>9}"
        "   ratio to clean (p50, p99, enq, started)"
    )
    for p in result["phases"]:
        r = p["ratio"]
        print(
            f"{p['cell'] + '/' + p['phase']:20} {p['claim_p50']:>9} {p['claim_p99']:>8}"
            f" {p['enqueue_p50']:>8} {p['started_per_s']:>9}   {r['claim_p50']}, {r['claim_p99']},"
            f" {r['enqueue_p50']}, {r['started_per_s']}"
        )
    print(f"\ntasks committed but never started: {result['not_started']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("produce")
    p.add_argument("--out", required=True)
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--burst", type=int, default=0)
    parser.add_argument("--cells", default="hold,rr,overload,burst")
    parser.add_argument("--rate", type=float, default=300, help="tasks/s offered")
    parser.add_argument("--rate-per-producer", type=float, default=250)
    parser.add_argument("--clean", type=float, default=120, help="seconds")
    parser.add_argument("--hold", type=float, default=1800, help="seconds the transaction is held")
    parser.add_argument("--pressure", type=float, default=300, help="seconds of the other cells")
    parser.add_argument("--recovery", type=float, default=180, help="seconds")
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--reader-seconds", type=float, default=60)
    parser.add_argument("--burst", type=int, default=20_000, help="tasks in the burst")
    parser.add_argument("--concurrency", type=int, default=16, help="threads per worker")
    parser.add_argument("--sample", type=float, default=60, help="seconds between samples")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "pressure-results.json"))
    args = parser.parse_args()
    if args.command == "produce":
        produce(args)
        return
    cells = [c for c in args.cells.split(",") if c]
    unknown = set(cells) - {"hold", "rr", "overload", "burst"}
    if unknown:
        parser.error(f"unknown cell(s): {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        url = stack.enter_context(cluster())
        amqp = stack.enter_context(vhost())
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pressure-")))
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TXQUEUE_DATABASE_URL": url,
            "TXQUEUE_AMQP_URL": amqp,
            "PRESSURE_DIR": str(folder),
        }
        subprocess.run(
            [sys.executable, "-m", "txqueue", "init"], env=env, check=True, capture_output=True
        )
        worker = [
            sys.executable,
            "-m",
            "txqueue",
            "worker",
            "--app",
            "benchmarks.pressure:registry",
            "--concurrency",
            str(args.concurrency),
        ]
        cleaner = [sys.executable, "-m", "txqueue", "cleaner", "--loop"]
        stack.enter_context(processes([worker, worker, cleaner], env, folder / "processes.log"))
        time.sleep(3)
        run = Run(url, env, folder, args)
        run.samples.append(sample(url))
        for cell in cells:
            run_cell(run, cell)
        time.sleep(5)  # the last tasks' starts
        result = analyse(run)
    print_report(result)
    Path(args.out).write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items() if k != "command"},
                **result,
                "explains": run.explains,
            },
            indent=1,
            default=str,
        )
        + "\n"
    )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (its cluster, vhost and processes are gone)")
