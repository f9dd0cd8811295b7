"""Every ``--json`` output held to its documented shape (txqueue/cli/json_shapes.py, which
the CLI reference renders): each command run in a real process on a real database that
holds every kind of thing it prints, its exact keys and their types checked, and its times
in UTC though the database session's zone is New York's."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import datetime, timedelta
from typing import Any

import click
import pytest
import typer.main

import txqueue
from txqueue import Task
from txqueue.cli import app
from txqueue.cli import json_shapes as shapes

from .helpers import connect, execute
from .test_cli import ROOT, cli


def _time(value: Any) -> bool:
    return isinstance(value, str) and datetime.fromisoformat(value).utcoffset() == timedelta(0)


def _id(value: Any) -> bool:
    return isinstance(value, str) and str(uuid.UUID(value)) == value


PRIMITIVES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "time": _time,
    "id": _id,
    "json": lambda v: True,
}


def check(value: Any, kind: str, where: str, seen: set[str]) -> None:
    """Fail unless ``value`` is of ``kind``: an object's keys exactly those documented.
    ``seen``: the objects met (not null), to show the data held each kind."""
    inner = kind.removesuffix("?")
    if inner == "json":  # any JSON value, null too
        return
    if value is None:
        assert kind.endswith("?"), f"{where}: null, where the docs say {kind}"
        return
    if inner.startswith("["):
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        for i, item in enumerate(value):
            check(item, inner[1:-1], f"{where}[{i}]", seen)
        return
    if inner in PRIMITIVES:
        assert PRIMITIVES[inner](value), f"{where}: {value!r} is not a {inner}"
        return
    shape = shapes.shape(inner)
    assert isinstance(value, dict), f"{where}: {value!r} is not an object"
    assert set(value) == set(shape), f"{where}: keys {sorted(value)}, documented {sorted(shape)}"
    seen.add(inner)
    for key, (of, _, _) in shape.items():
        check(value[key], of, f"{where}.{key}", seen)


def _json_commands(
    command: click.Command, path: tuple[str, ...] = (), flag: str = "--json"
) -> set[str]:
    """The commands under ``command`` that take ``flag``, as ``txqueue`` is followed by them."""
    found = set()
    if any(flag in p.opts for p in command.params):
        found.add(" ".join(path))
    for name, sub in getattr(command, "commands", {}).items():
        found |= _json_commands(sub, (*path, name), flag)
    return found


def test_every_command_that_takes_json_has_a_documented_shape() -> None:
    assert _json_commands(typer.main.get_command(app)) == set(shapes.COMMANDS)
    for name in shapes.COMMANDS.values():
        shapes.shape(name)  # named, among OUTPUTS or OBJECTS


def _listed(text: str, after: str, until: str) -> set[str]:
    """The commands named in backquotes in ``text`` between ``after`` and ``until``."""
    part = text.split(after, 1)[1].split(until, 1)[0]
    return set(re.findall(r"`([a-z][a-z -]*)`", part.replace("\n", " ")))


def test_the_cli_references_lists_of_commands_are_the_clis() -> None:
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    command = typer.main.get_command(app)
    assert _listed(page, "take `--json`:", "With it") == _json_commands(command)
    amqp = _listed(page, "read the broker", "also `--amqp-url`")
    assert amqp == _json_commands(command, flag="--amqp-url")


def test_the_documented_examples_have_the_documented_shapes() -> None:
    seen: set[str] = set()
    for name in {*shapes.COMMANDS.values(), *shapes.OBJECTS}:
        check(shapes.example(name), name, name, seen)
    assert seen >= set(shapes.OBJECTS) - {"horizon_holder"}


Q = "shapes"
registry = txqueue.Registry()


@registry.task("ok", queue=Q, max_attempts=1)
def ok(payload: Any, ctx: txqueue.TaskContext) -> dict[str, Any]:
    ctx.progress(1, 2, "half")
    return ctx.step("double", lambda n: {"n": n}, payload["n"])


@registry.task("boom", queue=Q, max_attempts=1)
def boom(payload: Any) -> None:
    raise ValueError("boom")


class Json:
    """Runs ``txqueue COMMAND ... --json`` and checks what it prints, noting the commands
    run and the objects met."""

    def __init__(self, db_url: str) -> None:
        self.env = {"TXQUEUE_DATABASE_URL": db_url, "PGTZ": "America/New_York"}
        self.ran: set[str] = set()
        self.seen: set[str] = set()

    def __call__(self, command: str, *args: str, code: int = 0) -> Any:
        result = cli(*command.split(), *args, "--json", env=self.env)
        assert result.returncode == code, result.stderr
        doc = json.loads(result.stdout)  # the whole of stdout is one JSON document
        check(doc, shapes.COMMANDS[command], f"txqueue {command}", self.seen)
        self.ran.add(command)
        return doc


def _fill(db_url: str) -> dict[str, str]:
    """Tasks in every state a command prints, with errors, events, progress, a lease, a
    start deadline; two workflows (one run); a schedule. Their ids, by what they are."""
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        ids = {
            "done": txqueue.enqueue(c, Task("ok", {"n": 1}, queue=Q)),
            "failed": txqueue.enqueue(c, Task("boom", queue=Q)),
            "pending": txqueue.enqueue(c, Task("later", queue=Q, expires=3600)),
            "running": txqueue.enqueue(c, Task("later", queue=Q)),
        }
        ran = txqueue.Workflow("ran")
        ran.add(Task("ok", {"n": 2}, queue=Q), after=[ran.add(Task("ok", {"n": 3}, queue=Q))])
        txqueue.enqueue_workflow(c, ran)
        idle = txqueue.Workflow("idle")
        idle.add(Task("later", queue=Q))
        txqueue.enqueue_workflow(c, idle)
        txqueue.create_schedule(c, "nightly", cron="0 3 * * *", task="ok", queue=Q)
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    execute(
        db_url,
        "UPDATE txqueue_tasks SET state = 'running', attempts = 1, worker_id = 'w', "
        "start_time = now(), expires_at = now() + interval '5 minutes' WHERE id = %s",
        (str(ids["running"]),),
    )
    return {"ran": str(ran.id), "idle": str(idle.id), **{k: str(v) for k, v in ids.items()}}


@pytest.mark.timeout(300)  # some thirty processes, each importing txqueue: 40 s on an idle CI
def test_every_json_output_has_its_documented_shape(pg_url: str) -> None:
    ids = _fill(pg_url)
    run = Json(pg_url)
    run("queue pause", Q)
    run("queue set", Q, "--concurrency", "5", "--rate-limit", "50/s")
    reads = _reads(run, ids)
    _changes(run, ids)
    assert run.ran == set(shapes.COMMANDS)
    # Every object the outputs hold was met with data in it, not only as null or [].
    missed = set(shapes.OBJECTS) - {"horizon_holder"} - run.seen
    assert not missed, f"no output held these with data: {sorted(missed)}"
    assert reads["status"]["queues"][0]["paused"] is True


def _reads(run: Json, ids: dict[str, str]) -> dict[str, Any]:
    """The commands that change nothing, all at once (each is a process of its own)."""
    calls = {
        "status": ("status",),
        "queues": ("queue show",),
        "running": ("show", ids["running"]),
        "pending": ("show", ids["pending"]),
        "failed": ("show", ids["failed"]),
        "done": ("wait", ids["done"]),
        "list": ("list",),
        "page": ("find", "--queue", Q, "--limit", "2"),
        "history": ("history", "--limit", "1000"),
        "dead": ("dead-letters",),
        "flow": ("workflow show", ids["ran"]),
        "flows": ("workflow list", "--limit", "1"),
    }
    with ThreadPoolExecutor(4) as pool:
        docs = dict(zip(calls, pool.map(lambda call: run(*call), calls.values()), strict=True))
    assert {q["queue"]: q["failed"] for q in docs["status"]["queues"]} == {Q: 1}
    assert docs["running"]["lease_expires_at"] is not None and docs["running"]["expires"] is None
    assert docs["pending"]["expires"] is not None
    [error] = docs["failed"]["errors"]
    assert (error["type"], error["message"]) == ("builtins.ValueError", "boom")
    assert docs["done"]["timed_out"] is False and docs["done"]["task"]["progress"]["done"] == 1
    assert len(docs["list"]["tasks"]) == 7 and len(docs["history"]["events"]) >= 7
    [group] = docs["dead"]["groups"]
    assert (group["name"], group["count"]) == ("boom", 1)
    assert [s["state"] for s in docs["flow"]["steps"]] == ["succeeded", "succeeded"]
    assert run("find", "--before", docs["page"]["next_before"])["next_before"] is None
    after = run("workflow list", "--before", docs["flows"]["next_before"])
    assert len(docs["flows"]["workflows"]) == 1 and len(after["workflows"]) == 1
    return docs


def _changes(run: Json, ids: dict[str, str]) -> None:
    """The commands that change things, in turn, each on what the one before left."""
    assert run("wait", ids["pending"], "--timeout", "0", code=5)["timed_out"] is True
    dry = run("dead-letters retry", "boom", "builtins.ValueError", "--dry-run")
    assert (dry["action"], dry["dry_run"], dry["matched"], dry["changed"]) == ("retry", True, 1, 0)
    assert run("dead-letters discard", "boom", "builtins.ValueError", "--dry-run")["matched"] == 1
    assert run("bulk retry", "--name", "boom")["changed"] == 1
    assert run("bulk cancel", "--name", "boom")["changed"] == 1
    done = run("bulk delete", "--name", "boom")
    assert (done["action"], done["dry_run"], done["matched"], done["changed"]) == (
        "delete",
        False,
        1,
        1,
    )
    assert run("cancel", ids["pending"]) == {
        "action": "cancel",
        "id": ids["pending"],
        "state": "cancelled",
    }
    assert run("retry", ids["pending"]) == {"action": "retry", "changed": 1}
    assert run("workflow cancel", ids["idle"])["changed"] == 1
    run("schedule create", "hourly", "--cron", "0 * * * *", "--task", "ok", "--queue", Q)
    assert run("schedule change", "hourly", "--cron", "30 * * * *")["cron"] == "30 * * * *"
    assert run("schedule pause", "hourly")["next_run"] is None
    run("schedule resume", "hourly")
    assert {s["name"] for s in run("schedule")["schedules"]} == {"nightly", "hourly"}
    assert run("queue resume", Q)["paused"] is False
    assert run("cleaner", "--once")["ok"] is True
