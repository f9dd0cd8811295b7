"""MkDocs hooks: the CLI reference is generated from the typer app, so it cannot drift; and
a page that draws a diagram loads its library from the site itself, so that it renders
offline (the theme would fetch it from a CDN)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = "<!-- txqueue-cli -->"


GITHUB_ONLY = re.compile(r"^\*On GitHub: .*?\*\n", re.M | re.S)
"""A note for a reader of the source on GitHub, where a generated page is not: not the site's."""


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = GITHUB_ONLY.sub("", markdown)
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


MERMAID = Path(__file__).parent / "assets" / "mermaid.min.js"


def on_pre_build(**_: Any) -> None:
    if not MERMAID.exists():
        raise PluginError("docs/assets/mermaid.min.js is missing: run bash docs/assets/mermaid.sh")


def on_post_page(output: str, page: Any, **_: Any) -> str:
    if 'class="mermaid"' not in output:
        return output
    # Before the theme's own script runs its diagrams: it uses a mermaid already loaded.
    root = "../" * page.url.count("/")
    tag = f'<script src="{root}assets/mermaid.min.js"></script>'
    return output.replace("</body>", f"{tag}\n</body>", 1)
