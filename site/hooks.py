"""MkDocs hooks: the CLI reference is generated from the typer app, so it cannot drift."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- txqueue-cli -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    import typer.cli
    import typer.main

    from txqueue.cli import app

    command = typer.main.get_command(app)
    generated = typer.cli.get_docs_for_click(
        obj=command, ctx=typer.Context(command), name="txqueue"
    )
    # typer writes the top command as a page title; here it sits under the page's own.
    body = generated.split("\n", 2)[2] if generated.startswith("# ") else generated
    return markdown.replace(MARKER, body.replace("\n## ", "\n### "))
