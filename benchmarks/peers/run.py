"""txqueue beside its peers, on one protocol, interleaved in one run. Run by hand, never in CI:

    /work/main/.venv/bin/python benchmarks/peers/run.py [--runs 3] [--tasks 20000] [--only a,b]

Each system runs from a virtualenv of its own (~/.cache/txqueue-peers/<package>, made from
requirements/<package>.txt when missing or out of date; txqueue's two settings share one),
its workers and producer being the module systems/bench_<package>.py. Every handler does
one thing: append its task's index and the time it started to a file (systems/harness.py).
Each run measures, for each system in turn (so that every system of a run sees the same
machine):

- drain: --tasks tasks committed before any worker starts, then the workers; tasks / (last
  handler start - first handler start), from the handlers' own lines;
- latency: workers started and warmed by 50 tasks (not counted), then --latency-tasks
  (3,000) committed (or sent) one per transaction at 50/s; handler start - the time the
  commit returned.

Each measurement gets a scratch PostgreSQL database and RabbitMQ vhost (for the systems
that use them), dropped after it, and its workers are killed whatever happens. Prints the
medians and writes every run to results.json beside this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENVS = Path.home() / ".cache" / "txqueue-peers"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/{vhost}"
REDIS_URL = (
    "redis://127.0.0.1:6379/13"  # a chord's results (Celery), flushed around each measurement
)
WARMUP, LATENCY_RATE = 50, 50.0


@dataclass(frozen=True)
class System:
    name: str
    package: str  # the distribution whose version is reported
    setting: str
    workers: tuple[tuple[str, ...], ...]  # one command per process (group) the runner starts
    setup: tuple[str, ...] = ()  # creates its tables in the scratch database
    database: bool = False
    broker: bool = False
    chains: bool = False  # has chains of its own (the chain measurement)
    joins: bool = False  # has joins of its own (the fan-in measurement)
    results: bool = False  # keeps results in Redis (a Celery chord needs a backend)
    # The CPU-bound measurement's one worker process (with its pool), if it has one.
    cpu: tuple[str, ...] = ()


PROCRASTINATE = ("procrastinate", "--app", "bench_procrastinate.app")

# Each at its best documented setting for throughput with two processes on two cores; the
# modules in systems/ say where each is documented.
TXQUEUE = System(
    "txqueue",
    "txqueue",
    "2 x `txqueue worker` at its defaults (8 threads each); PostgreSQL + RabbitMQ wake-ups",
    (("txqueue", "worker", "--app", "bench_txqueue:registry"),) * 2,
    setup=("txqueue", "init"),
    database=True,
    broker=True,
    chains=True,
    joins=True,
    cpu=("txqueue", "worker", "--app", "bench_txqueue:registry"),
)
TXQUEUE_PROCESSES = ("txqueue", "worker", "--app", "bench_txqueue:registry", "--pool", "processes")

SYSTEMS = (
    TXQUEUE,
    dataclasses.replace(
        TXQUEUE,
        name="txqueue-notify",
        setting="the same without RabbitMQ: woken by PostgreSQL's NOTIFY",
        broker=False,
        cpu=(),
    ),
    dataclasses.replace(
        TXQUEUE,
        name="txqueue-processes",
        setting="2 x `txqueue worker --pool processes` (a child per CPU each); RabbitMQ",
        workers=(TXQUEUE_PROCESSES,) * 2,
        chains=False,
        joins=False,
        cpu=TXQUEUE_PROCESSES,
    ),
    System(
        "pgqueuer",
        "pgqueuer",
        "2 x `pgq run --batch-size 50`, asyncpg pool, LISTEN/NOTIFY",
        (("pgq", "run", "bench_pgqueuer:create", "--batch-size", "50"),) * 2,
        setup=("pgq", "install"),
        database=True,
    ),
    System(
        "dramatiq",
        "dramatiq",
        "`dramatiq --processes 2 --threads 8`, RabbitMQ broker",
        (("dramatiq", "bench_dramatiq", "--processes", "2", "--threads", "8"),),
        broker=True,
        chains=True,
    ),
    System(
        "celery",
        "celery",
        "`celery worker --pool prefork --concurrency 2`, prefetch multiplier 128, RabbitMQ",
        (("celery", "-A", "bench_celery", "worker", "--pool", "prefork", "--concurrency", "2"),),
        broker=True,
        chains=True,
        joins=True,
        results=True,
        cpu=("celery", "-A", "bench_celery", "worker", "--pool", "prefork", "--concurrency", "2"),
    ),
    System(
        "procrastinate",
        "procrastinate",
        "2 x `procrastinate worker --concurrency 30`, log level warning, async task, LISTEN/NOTIFY",
        ((*PROCRASTINATE, "--log-level", "warning", "worker", "--concurrency", "30"),) * 2,
        setup=(*PROCRASTINATE, "schema", "--apply"),
        database=True,
    ),
)


class Failure(Exception):
    """One measurement of one system went wrong: reported, and the run goes on."""


# --- virtualenvs -------------------------------------------------------------------------


def venv_bin(system: System, program: str) -> str:
    return str(VENVS / system.package / "bin" / program)


def ensure_venv(system: System) -> None:
    """The system's virtualenv (one per package: txqueue's two settings share it),
    installed from its pinned requirements when they changed."""
    requirements = HERE / "requirements" / f"{system.package}.txt"
    venv = VENVS / system.package
    marker = venv / "peers-requirements.txt"
    if marker.exists() and marker.read_text() == requirements.read_text():
        return
    print(f"installing {system.package} into {venv}", flush=True)
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # From the repository's root, where txqueue's `-e .` points.
    subprocess.run(
        [venv_bin(system, "pip"), "install", "-q", "-r", str(requirements)], cwd=ROOT, check=True
    )
    shutil.copyfile(requirements, marker)


def version(system: System) -> str:
    return subprocess.run(
        [
            venv_bin(system, "python"),
            "-c",
            f"import importlib.metadata as m; print(m.version({system.package!r}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


# --- one measurement's world -------------------------------------------------------------


def quiet(argv: Sequence[str], **kwargs: Any) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise Failure(f"{' '.join(argv)} failed: {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


@contextmanager
def scratch(system: System) -> Iterator[dict[str, str]]:
    """The environment of one measurement: its own stamps folder, database and vhost,
    all gone when it ends."""
    tag = f"peers_{system.name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        folder = tempfile.mkdtemp(prefix=f"{tag}_")
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        env = {
            **os.environ,
            "PYTHONPATH": str(HERE / "systems"),
            "PYTHONDONTWRITEBYTECODE": "1",  # nothing left in systems/
            "PEERS_STAMPS": folder,
        }
        if system.database:
            with psycopg.connect(ADMIN_URL, autocommit=True) as c:
                c.execute(f"CREATE DATABASE {tag}")
            stack.callback(drop_database, tag)
            url = urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{tag}"))
            # PGDSN and TXQUEUE_DATABASE_URL: what `pgq` and `txqueue` read for themselves.
            env |= {"PEERS_DATABASE_URL": url, "PGDSN": url, "TXQUEUE_DATABASE_URL": url}
        if system.broker:
            quiet(["rabbitmqctl", "-q", "add_vhost", tag])
            stack.callback(quiet, ["rabbitmqctl", "-q", "delete_vhost", tag])
            quiet(["rabbitmqctl", "-q", "set_permissions", "-p", tag, "guest", ".*", ".*", ".*"])
            url = AMQP_URL.format(vhost=tag)
            env |= {"PEERS_AMQP_URL": url, "TXQUEUE_AMQP_URL": url}
        else:  # txqueue-notify's wake-ups are PostgreSQL's, whatever the shell has set
            env.pop("TXQUEUE_AMQP_URL", None)
        if system.results:
            quiet(["redis-cli", "-u", REDIS_URL, "FLUSHDB"])
            stack.callback(quiet, ["redis-cli", "-u", REDIS_URL, "FLUSHDB"])
            env |= {"PEERS_REDIS_URL": REDIS_URL}
        if system.setup:
            quiet([venv_bin(system, system.setup[0]), *system.setup[1:]], env=env, cwd=folder)
        yield env


def drop_database(name: str) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def workers(
    system: System, env: dict[str, str], commands: Sequence[Sequence[str]] = ()
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The system's worker processes (or ``commands``), each leading a process group of its
    own, so that whatever it forks is stopped with it; killed on the way out, whatever the
    way."""
    procs: list[subprocess.Popen[bytes]] = []
    log = Path(env["PEERS_STAMPS"]) / "workers.log"
    try:
        with log.open("ab") as out:
            for argv in commands or system.workers:
                procs.append(
                    subprocess.Popen(
                        [venv_bin(system, argv[0]), *argv[1:]],
                        env=env,
                        cwd=env["PEERS_STAMPS"],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield procs
    except Failure as e:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise Failure(f"{e}\n--- the workers' log, its end:\n{tail}") from None
    finally:
        stop(procs)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    signal_groups(procs, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in procs:
        with suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
    # Whatever is left, the leaders' children included.
    signal_groups(procs, signal.SIGKILL)
    for p in procs:
        p.wait()


def signal_groups(procs: list[subprocess.Popen[bytes]], sig: signal.Signals) -> None:
    for p in procs:
        with suppress(ProcessLookupError):
            os.killpg(p.pid, sig)


def produce(system: System, env: dict[str, str], *args: object) -> str:
    return quiet(
        [venv_bin(system, "python"), "-m", f"bench_{system.package}", *map(str, args)],
        env=env,
        cwd=env["PEERS_STAMPS"],
    )


def read_stamps(folder: Path) -> dict[int, float]:
    """Each task's handler start; the first, should a system have run one twice."""
    started: dict[int, float] = {}
    for path in folder.glob("*.stamps"):
        for line in path.read_text().splitlines():
            index, at = line.split()
            started[int(index)] = min(float(at), started.get(int(index), float("inf")))
    return started


def wait_started(
    env: dict[str, str], indices: range, procs: list[subprocess.Popen[bytes]], timeout: float
) -> dict[int, float]:
    folder = Path(env["PEERS_STAMPS"])
    deadline = time.monotonic() + timeout
    while True:
        # Lines are counted before they are read: parsing 20,000 of them five times a second
        # would take CPU from the workers being measured.
        lines = sum(path.read_bytes().count(b"\n") for path in folder.glob("*.stamps"))
        if lines >= len(indices) or time.monotonic() > deadline:
            started = read_stamps(folder)
            got = {i: started[i] for i in indices if i in started}
            if len(got) == len(indices):
                return got
            if time.monotonic() > deadline:
                raise Failure(f"{len(got):,} of {len(indices):,} tasks started in {timeout:.0f} s")
        if any(p.poll() is not None for p in procs):
            raise Failure("a worker exited before its tasks were done")
        time.sleep(0.2)


# --- the two measurements ----------------------------------------------------------------


def drain(system: System, n: int) -> float:
    with scratch(system) as env:
        produce(system, env, "drain", n)
        with workers(system, env) as procs:
            started = wait_started(env, range(n), procs, timeout=max(120.0, n / 20))
    return n / (max(started.values()) - min(started.values()))


def latency(system: System, n: int) -> dict[str, float]:
    """Commit to handler start of ``n`` tasks enqueued one per transaction at the rate."""
    with scratch(system) as env, workers(system, env) as procs:
        produce(system, env, "latency", WARMUP, LATENCY_RATE, -WARMUP)
        wait_started(env, range(-WARMUP, 0), procs, timeout=120)
        out = produce(system, env, "latency", n, LATENCY_RATE, 0)
        committed = {int(i): float(t) for i, t in (line.split() for line in out.splitlines())}
        started = wait_started(env, range(n), procs, timeout=60)
    ms = sorted((started[i] - committed[i]) * 1000 for i in range(n))

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 2)

    return {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99), "max": round(ms[-1], 2)}


def chain(system: System, hops: int) -> float:
    """A chain of ``hops`` steps, once the workers are warm: the median, in ms, from a
    step's start to its child's."""
    with scratch(system) as env, workers(system, env) as procs:
        produce(system, env, "latency", WARMUP, LATENCY_RATE, -WARMUP)
        wait_started(env, range(-WARMUP, 0), procs, timeout=120)
        produce(system, env, "chain", hops)
        started = wait_started(env, range(hops), procs, timeout=120)
    gaps = [(started[i + 1] - started[i]) * 1000 for i in range(hops - 1)]
    return round(statistics.median(gaps), 3)


def fan_in(system: System, n: int) -> float:
    """``n`` parts joined by one task, once the workers are warm: seconds from the
    producer's commit (or send) returning to the join's start."""
    with scratch(system) as env, workers(system, env) as procs:
        produce(system, env, "latency", WARMUP, LATENCY_RATE, -WARMUP)
        wait_started(env, range(-WARMUP, 0), procs, timeout=120)
        sent = float(produce(system, env, "fanin", n).split()[-1])
        started = wait_started(env, [n], procs, timeout=300)
    return round(started[n] - sent, 3)


# --- the run -----------------------------------------------------------------------------


CPU_ENDED = 10_000_000  # harness.ENDED: a CPU-bound task i stamps this + i as it ends


def cpu(system: System, n: int) -> float:
    """``n`` CPU-bound tasks (about 100 ms of pure Python each) committed before the
    system's one worker process starts: seconds from the first start to the last end."""
    with scratch(system) as env:
        produce(system, env, "cpu", n)
        with workers(system, env, [system.cpu]) as procs:
            ends = wait_started(env, range(CPU_ENDED, CPU_ENDED + n), procs, timeout=60 + n)
            starts = read_stamps(Path(env["PEERS_STAMPS"]))
    return round(max(ends.values()) - min(starts[i] for i in range(n)), 2)


def machine(systems: Sequence[System]) -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    with psycopg.connect(ADMIN_URL) as c:
        row = c.execute("SHOW server_version").fetchone()
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "postgresql": row[0] if row else "?",
        "rabbitmq": quiet(["rabbitmqctl", "-q", "version"]).strip(),
        "txqueue_checkout": commit,
        "versions": {s.name: version(s) for s in systems},
        "settings": {s.name: s.setting for s in systems},
    }


def medians(runs: list[dict[str, Any]], systems: Sequence[System]) -> dict[str, dict[str, float]]:
    out = {}
    for s in systems:
        ok = [r for r in runs if r["system"] == s.name and "error" not in r]
        if ok:
            out[s.name] = {}
            if all("drain" in r for r in ok):
                out[s.name] = {
                    "drain": round(statistics.median(r["drain"] for r in ok)),
                    "p50": round(statistics.median(r["latency"]["p50"] for r in ok), 2),
                    "p99": round(statistics.median(r["latency"]["p99"] for r in ok), 2),
                }
            for key in ("chain_hop_ms", "fan_in_s", "cpu_s"):
                values = [r[key] for r in ok if key in r]
                if values:
                    out[s.name][key] = round(statistics.median(values), 3)
    return out


def report(med: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    print(
        f"\nmedians of {args.runs} run(s): drain of {args.tasks:,} tasks (first to last handler"
        f" start); commit to handler start, {args.latency_tasks:,} tasks at {LATENCY_RATE:.0f}/s\n"
    )
    print(
        f"  {'system':17} {'drain tasks/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'chain hop ms':>12}"
        f" {'fan-in s':>9} {'cpu s':>7}"
    )
    for name, m in med.items():
        cells = [f"{m['drain']:>13,}" if "drain" in m else f"{'-':>13}"]
        for key, width, digits in (
            ("p50", 8, 2),
            ("p99", 8, 2),
            ("chain_hop_ms", 12, 2),
            ("fan_in_s", 9, 3),
            ("cpu_s", 7, 2),
        ):
            cells.append(f"{m[key]:>{width}.{digits}f}" if key in m else f"{'-':>{width}}")
        print(f"  {name:17} {' '.join(cells)}")
    burnt = {name: m["cpu_s"] for name, m in med.items() if "cpu_s" in m}
    if "txqueue" in burnt and "txqueue-processes" in burnt:
        print(
            f"\n  cpu: threads / processes: {burnt['txqueue'] / burnt['txqueue-processes']:.2f}x"
            + (
                f"; processes / celery: {burnt['txqueue-processes'] / burnt['celery']:.2f}x"
                if "celery" in burnt
                else ""
            )
        )
    if any("drain" not in m for m in med.values()):
        return
    ours = med.get("txqueue")
    peers = {name: m for name, m in med.items() if not name.startswith("txqueue")}
    notify, pgqueuer = med.get("txqueue-notify"), med.get("pgqueuer")
    if notify and pgqueuer:
        print(
            f"\n  txqueue-notify p50 - pgqueuer's: {notify['p50'] - pgqueuer['p50']:+.2f} ms,"
            f" p99: {notify['p99'] - pgqueuer['p99']:+.2f} ms"
        )
    if not ours or not peers:
        return
    best = max(peers, key=lambda name: peers[name]["drain"])
    print(f"\n  txqueue drain / best peer's ({best}): {ours['drain'] / peers[best]['drain']:.2f}x")
    if "dramatiq" in peers:
        print(f"  txqueue p50 - dramatiq's: {ours['p50'] - peers['dramatiq']['p50']:+.2f} ms")
    best = min(peers, key=lambda name: peers[name]["p99"])
    print(f"  txqueue p99 - best peer's ({best}): {ours['p99'] - peers[best]['p99']:+.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks drained per measurement")
    parser.add_argument(
        "--latency-tasks", type=int, default=3000, help="tasks timed per latency measurement"
    )
    parser.add_argument("--only", default="", help="comma-separated systems (default: all)")
    parser.add_argument("--hops", type=int, default=100, help="steps of the chain (0: none)")
    parser.add_argument("--fan-in", type=int, default=10_000, help="parts of the join (0: none)")
    parser.add_argument(
        "--cpu", type=int, default=400, help="CPU-bound tasks, one worker process (0: none)"
    )
    parser.add_argument(
        "--no-drain", action="store_true", help="skip the drain and latency measurements"
    )
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or [s.name for s in SYSTEMS]
    unknown = set(names) - {s.name for s in SYSTEMS}
    if unknown:
        parser.error(f"unknown system(s): {', '.join(sorted(unknown))}")
    systems = [s for s in SYSTEMS if s.name in names]
    # A SIGTERM unwinds like Ctrl-C, through the blocks that stop workers and drop databases.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for s in systems:
        ensure_venv(s)
    info = machine(systems)
    runs: list[dict[str, Any]] = []
    for run in range(args.runs):
        print(f"run {run + 1} of {args.runs}", flush=True)
        for s in systems:
            row: dict[str, Any] = {"run": run + 1, "system": s.name}
            try:
                if not args.no_drain:
                    row["drain"] = round(drain(s, args.tasks))
                    row["latency"] = latency(s, args.latency_tasks)
                if s.cpu and args.cpu:
                    row["cpu_s"] = cpu(s, args.cpu)
                if s.chains and args.hops:
                    row["chain_hop_ms"] = chain(s, args.hops)
                if s.joins and args.fan_in:
                    row["fan_in_s"] = fan_in(s, args.fan_in)
            except Failure as e:
                row["error"] = str(e)
            runs.append(row)
            shown = {k: v for k, v in row.items() if k not in ("run", "system")}
            print(f"  {s.name}: {shown}", flush=True)
    med = medians(runs, systems)
    report(med, args)
    (HERE / "results.json").write_text(
        json.dumps({"machine": info, "args": vars(args), "runs": runs, "medians": med}, indent=2)
        + "\n"
    )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (its workers stopped, its databases and vhosts dropped)")
