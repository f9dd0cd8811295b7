"""The documentation's code runs: every Python block on the site is written in its page and
is a copy, kept current by docs/sync_code.py, of a file under docs/snippets/ (or
examples/) that these tests run (the home page's fifteen lines run from the page itself),
and every txqueue command in its shell blocks is one the CLI accepts."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from tests.unit.test_deploy import accepts
from txqueue import broker

from .helpers import wait_until
from .test_cli import TXQUEUE, cli, listeners

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SNIPPETS = DOCS / "snippets"
HOME = DOCS / "index.md"
TUTORIAL = DOCS / "tutorial.md"
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
COPIED = re.compile(r"^ *<!-- code: [^>]+ -->$")

sys.path.insert(0, str(DOCS))
import sync_code  # noqa: E402  (docs/sync_code.py: the copier, and what it checks)


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if SNIPPETS not in p.parents)


def _blocks(language: str) -> list[tuple[Path, str]]:
    return [
        (page, textwrap.dedent(m["body"]))
        for page in _pages()
        for m in FENCE.finditer(page.read_text())
        if m["lang"] == language
    ]


def test_every_python_block_is_written_in_its_page_and_copied_from_code_the_suite_runs() -> None:
    seen = 0
    for page in _pages():
        text = page.read_text()
        for m in FENCE.finditer(text):
            assert "--8<--" not in m["body"], f"{page.relative_to(ROOT)}: an include in a block"
            if m["lang"] != "python" or page == HOME or m["body"].lstrip().startswith("# Celery"):
                continue  # the home page's runs from the page; Celery's is shown beside ours
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            assert COPIED.match(before), f"{page.relative_to(ROOT)}: a block from no file"
            seen += 1
    assert seen >= 40, seen


def test_every_copied_block_is_its_sources_as_they_are_now() -> None:
    for page in sync_code.pages():
        for sources, shown, now in sync_code.blocks(page.read_text()):
            assert shown == now, (
                f"{page.relative_to(ROOT)}: the block of {sources} is stale: "
                "python docs/sync_code.py writes it again"
            )


def _commands(body: str) -> list[list[str]]:
    """The txqueue commands of a shell block, as argv lists."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.removeprefix("$ ").split("#", 1)[0]
        for part in re.split(r"&&|;|\|\|", line):
            argv = shlex.split(part)
            while argv and "=" in argv[0] and not argv[0].startswith("-"):
                argv = argv[1:]  # VAR=value before the command
            if argv and argv[0].endswith("txqueue") and len(argv) > 1:
                commands.append(argv)
    return commands


def test_every_txqueue_command_in_the_docs_is_one_the_cli_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)  # --app modules are imported from the working directory
    monkeypatch.syspath_prepend(str(SNIPPETS))
    monkeypatch.syspath_prepend(str(SNIPPETS / "tutorial"))
    seen = 0
    for page, body in _blocks("bash") + _blocks("console"):
        for argv in _commands(body):
            try:
                accepts(argv)
            except BaseException as e:
                pytest.fail(f"{page.relative_to(ROOT)}: {shlex.join(argv)}: {e!r}")
            seen += 1
    assert seen >= 15, seen  # the check is not vacuous


def _environment(env: dict[str, str]) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    return {**clean, **env}


def _python(
    cwd: Path, env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python *args`` in ``cwd``, with no TXQUEUE_ variable but those of ``env``."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_environment(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _txqueue(cwd: Path, env: dict[str, str], *args: str) -> str:
    run = cli(*args, env=env, cwd=cwd)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_the_tutorial_on_sqlite_runs_as_written(tmp_path: Path) -> None:
    for name in ("tasks.py", "shop.py"):
        (tmp_path / name).write_text((SNIPPETS / "tutorial" / name).read_text())
    env = {"PYTHONPATH": str(ROOT)}
    _txqueue(tmp_path, env, "init")
    shop = _python(tmp_path, env, "shop.py")
    assert shop.returncode == 0, shop.stderr
    [task] = json.loads(_txqueue(tmp_path, env, "list", "--json"))["tasks"]
    pending = json.loads(_txqueue(tmp_path, env, "show", task["id"], "--json"))
    assert (pending["name"], pending["state"], pending["payload"]) == (
        "send_receipt",
        "pending",
        {"order": 1},
    )
    worked = _txqueue(tmp_path, env, "worker", "--app", "tasks:registry", "--burst")
    assert "receipt for order 1 sent" in worked and "999" not in worked
    shown = json.loads(_txqueue(tmp_path, env, "show", task["id"], "--json"))
    assert (shown["state"], shown["result"]) == ("succeeded", "customer-1@example.com")


@pytest.mark.parametrize("rabbitmq", [False, True], ids=["notify", "rabbitmq"])
def test_the_tutorial_on_postgresql_runs_as_written(
    tmp_path: Path, pg_url: str, amqp_url: str, rabbitmq: bool
) -> None:
    """Its PostgreSQL half (woken by NOTIFY), then RabbitMQ's: the worker says which, and
    the task starts well within a second of the commit."""
    for name in ("tasks.py", "shop_pg.py"):
        (tmp_path / name).write_text((SNIPPETS / "tutorial" / name).read_text())
    env = {
        "PYTHONPATH": str(ROOT),
        "TXQUEUE_DATABASE_URL": pg_url,
        "TXQUEUE_AMQP_URL": amqp_url if rabbitmq else "",
    }
    _txqueue(tmp_path, env, "init")
    worker = subprocess.Popen(
        [*TXQUEUE, "worker", "--app", "tasks:registry"],
        cwd=tmp_path,
        env=_environment(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        if rabbitmq:
            wait_until(lambda: broker.check(amqp_url, ["emails"]) == {"emails": 0}, timeout=30)
        else:
            wait_until(lambda: listeners(pg_url) == 1, timeout=30)
        time.sleep(0.3)  # past its first poll
        shop = _python(tmp_path, env, "shop_pg.py")
        assert shop.returncode == 0, shop.stderr
        assert shop.stdout == "customer-1@example.com\n"
    finally:
        worker.terminate()
        output = worker.communicate(timeout=60)[0].decode()
        if rabbitmq:
            broker.delete_queue(amqp_url, "emails")
    assert "receipt for order 1 sent" in output and "Traceback" not in output, output
    said = "woken by RabbitMQ, and by " if rabbitmq else "woken by "
    assert said + "PostgreSQL NOTIFY" in output, output
    if not rabbitmq:  # the line the tutorial quotes, but for the worker's id
        quoted = re.search(r"INFO txqueue\.worker: worker \S+ (.*)", TUTORIAL.read_text())
        assert quoted is not None and quoted[1] in output, output
    with psycopg.connect(pg_url) as c:
        row = c.execute("SELECT start_time - created_at FROM txqueue_tasks").fetchone()
    assert row is not None and row[0].total_seconds() < 0.5, row


def _run_snippet(path: Path, cwd: Path, db_url: str) -> subprocess.CompletedProcess[str]:
    env = {
        "TXQUEUE_DATABASE_URL": db_url,
        "TXQUEUE_TEST_DATABASE_URL": os.environ.get("TXQUEUE_TEST_DATABASE_URL", ""),
        "PYTHONPATH": os.pathsep.join([str(SNIPPETS), str(ROOT)]),
    }
    if path.name.startswith("test_"):
        return _python(
            cwd, env, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path), timeout=90
        )
    return _python(cwd, env, str(path), timeout=90)


@pytest.mark.parametrize(
    "snippet", sorted(p.name for p in SNIPPETS.glob("*.py")), ids=lambda name: name[:-3]
)
def test_the_snippet_runs(snippet: str, pg_url: str, tmp_path: Path) -> None:
    run = _run_snippet(SNIPPETS / snippet, tmp_path, pg_url)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("page", [ROOT / "README.md", HOME], ids=["readme", "home"])
def test_the_fifteen_lines_run_as_written(page: Path, tmp_path: Path) -> None:
    text = page.read_text()
    example = text.split("## In fifteen lines", 1)[1].split("```python\n", 1)[1]
    example = example.split("```", 1)[0]
    assert len(example.strip().splitlines()) <= 20
    run = _python(tmp_path, {"PYTHONPATH": str(ROOT)}, "-c", example)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "receipt for order 42 sent\n"


def test_the_home_pages_commands_are_the_readmes() -> None:
    readme, home = (ROOT / "README.md").read_text(), HOME.read_text()
    for command in ("bash tests/run", ".venv/bin/txqueue demo"):
        assert command in readme and command in home, command


def test_ci_runs_the_readmes_test_command() -> None:
    """So CI cannot pass where a newcomer following the README fails."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("**Run the tests.**", 1)[1]
    command = section.split("```bash\n", 1)[1].split("```", 1)[0].strip()
    assert command == "bash tests/run"
    assert re.search(rf"^[^#\n]*{re.escape(command)}$", (ROOT / ".ci/run").read_text(), re.M)


def test_the_readmes_links_lead_to_files() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) > 25, links
    for link in links:
        assert (ROOT / link).exists(), link
