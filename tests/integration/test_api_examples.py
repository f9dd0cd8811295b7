"""Every public name of txqueue and txqueue.testing has an example in its docstring (the API
reference shows it), and every example runs: each on a fresh PostgreSQL database, with the
names the reference says examples take as given (docs/reference/index.md), made by
docs/snippets/api_examples.py, which the page shows."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import runpy
from pathlib import Path
from typing import Any

import psycopg
import pytest

import txqueue
import txqueue.testing

EXAMPLE = re.compile(r"^Example:\n\n```python\n(?P<code>.*?)^```$", re.M | re.S)
GIVEN = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "api_examples.py"
PUBLIC = [(txqueue, name) for name in txqueue.__all__] + [
    (txqueue.testing, name) for name in txqueue.testing.__all__
]


def _examples(module: Any, name: str) -> list[str]:
    return [m["code"] for m in EXAMPLE.finditer(inspect.getdoc(getattr(module, name)) or "")]


def _given(url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What an example may take as given: the names the reference's index shows made."""
    monkeypatch.setenv("TXQUEUE_DATABASE_URL", url)
    made = runpy.run_path(str(GIVEN))
    return {
        name: made[name]
        for name in ("txqueue", "psycopg", "url", "registry", "send_receipt", "charge", "task_id")
    }


async def _run_async(code: Any, names: dict[str, Any]) -> None:
    async with await psycopg.AsyncConnection.connect(names["url"]) as conn:
        names["conn"] = conn
        result = eval(code, names)
        if inspect.iscoroutine(result):
            await result
        await conn.commit()


def test_every_public_name_has_an_example() -> None:
    assert [f"{m.__name__}.{n}" for m, n in PUBLIC if not _examples(m, n)] == []


@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=[f"{m.__name__}.{n}" for m, n in PUBLIC])
def test_the_example_runs(
    module: Any, name: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for example in _examples(module, name):
        names = _given(pg_url, monkeypatch)
        code = compile(
            example, f"<example of {name}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        try:
            if "await " in example:
                asyncio.run(_run_async(code, names))
            else:
                with psycopg.connect(pg_url) as conn:  # commits when the example ends
                    names["conn"] = conn
                    exec(code, names)
        finally:
            txqueue.configure()  # what an example of configure set
