"""MkDocs hooks: the CLI reference is generated from the typer app, and its JSON output's
shapes from txqueue/cli/json_shapes.py (which the suite holds the commands to), so neither
can drift; and a page that draws a diagram loads its library from the site itself, so that
it renders offline (the theme would fetch it from a CDN)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = "<!-- txqueue-cli -->"
JSON_MARKER = "<!-- txqueue-json -->"


GITHUB_ONLY = re.compile(r"^\*On GitHub: .*?\*\n", re.M | re.S)
"""A note for a reader of the source on GitHub, where a generated page is not: not the site's."""


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = GITHUB_ONLY.sub("", markdown)
    if JSON_MARKER in markdown:
        markdown = markdown.replace(JSON_MARKER, json_shapes())
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


def json_shapes() -> str:
    """Each --json output: the commands that print it, its keys, and an example; then the
    objects inside them."""
    import json

    from txqueue.cli import json_shapes as shapes

    printed: dict[str, list[str]] = {}
    for command, name in shapes.COMMANDS.items():
        printed.setdefault(name, []).append(f"`txqueue {command} --json`")
    parts = []
    for name, commands in printed.items():
        example = json.dumps(shapes.example(name), indent=2)
        parts.append(f"### {', '.join(commands)} {{#json-{name}}}\n\n{_keys(name)}")
        parts.append(f"```json\n{example}\n```\n")
    parts.append("### Objects inside them\n")
    for name in shapes.OBJECTS:
        if name not in printed:
            parts.append(f"#### {name} {{#json-{name}}}\n\n{_keys(name)}")
    return "\n".join(parts)


def _keys(name: str) -> str:
    from txqueue.cli import json_shapes as shapes

    rows = ["| key | type | meaning |", "|---|---|---|"]
    rows += [
        f"| `{key}` | {_type(kind)} | {meaning} |"
        for key, (kind, _, meaning) in shapes.shape(name).items()
    ]
    return "\n".join(rows) + "\n"


def _type(kind: str) -> str:
    from txqueue.cli import json_shapes as shapes

    inner, nullable = kind.removesuffix("?"), kind.endswith("?")
    listed = inner.startswith("[")
    inner = inner.strip("[]")
    shown = f"[{inner}](#json-{inner})" if inner in {**shapes.OBJECTS, **shapes.OUTPUTS} else inner
    return ("list of " if listed else "") + shown + (" or null" if nullable else "")


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
