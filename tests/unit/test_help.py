"""The CLI's help, rendered as a user sees it at 80 columns: every option says what it
does, and nothing the help says is lost (square brackets, defaults) or cut."""

from __future__ import annotations

import re

import click
import pytest
import typer
from typer.testing import CliRunner

from txqueue.cli import app

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "80"}, color=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_shown_whole_with_its_help(command: str) -> None:
    text = _help(command)
    assert not re.search(r"[\w-]…", text), text  # a name or word cut short
    assert max(len(line) for line in text.splitlines()) <= 80, text
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{command} {param.opts[0]} has no help text"
            for name in param.opts:
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (name, text)


def test_square_brackets_and_defaults_survive() -> None:
    worker = _help("worker")
    assert "[default: 1; 0.1 when nothing wakes it]" in re.sub(r"\s+", " ", worker)
    assert "[default: sqlite:///txqueue.db]" in re.sub(r"\s+", " ", worker)
    assert "needs the metrics extra" in re.sub(r"\s+", " ", worker)
