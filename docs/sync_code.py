"""The documentation's code blocks, copied from the files the suite runs.

A block names its sources in a comment on the line before it, each a file (under
docs/snippets, examples or the repository's root) or a section of one (`file:name`, the
lines between `# --8<-- [start:name]` and `# --8<-- [end:name]`, dedented):

    <!-- code: tutorial/tasks.py:tasks -->
    ```python
    ...the section's lines...
    ```

The page holds the code itself, so GitHub, an editor and the site show the same thing;
`python docs/sync_code.py` writes every block from its sources again, and the suite fails
while any block differs from them (tests/integration/test_docs.py), so no page can show
code other than what the suite runs.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BASES = (DOCS / "snippets", ROOT / "examples", ROOT)
BLOCK = re.compile(
    r"^(?P<indent>[ ]*)<!-- code: (?P<sources>[^>]+?) -->\n"
    r"(?P=indent)(?P<fence>```[^\n]*)\n(?P<body>.*?)^(?P=indent)```$",
    re.M | re.S,
)
SECTION_MARK = re.compile(r"--8<-- \[(start|end):[\w-]+\]")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if DOCS / "snippets" not in p.parents)


def source(spec: str) -> str:
    """One source's lines, as the page shows them."""
    path, _, name = spec.partition(":")
    found = [base / path for base in BASES if (base / path).is_file()]
    if not found:
        raise SystemExit(f"docs/sync_code.py: no file {path} under docs/snippets, examples or .")
    lines = found[0].read_text().splitlines()
    if name:
        start, end = f"--8<-- [start:{name}]", f"--8<-- [end:{name}]"
        begin = next((i for i, line in enumerate(lines) if start in line), None)
        stop = next((i for i, line in enumerate(lines) if end in line), None)
        if begin is None or stop is None or stop < begin:
            raise SystemExit(f"docs/sync_code.py: {path} has no section {name!r}")
        lines = lines[begin + 1 : stop]
    shown = [line for line in lines if not SECTION_MARK.search(line)]
    text = "\n".join(shown).strip("\n")  # blank lines kept before a section's end mark
    return textwrap.dedent(text + "\n") if text else ""


def body(m: re.Match[str]) -> str:
    """What the block's sources hold now, indented as the block is (in a list item)."""
    parts = [source(s) for s in m["sources"].split()]
    text = parts[0] if parts else ""
    for part in parts[1:]:  # PEP 8's two blank lines before a definition, else one
        text += ("\n\n" if part.startswith(("def ", "async def ", "class ", "@")) else "\n") + part
    return textwrap.indent(text, m["indent"])


def blocks(text: str) -> list[tuple[str, str, str]]:
    """Each copied block's sources, what it shows, and what its sources hold now."""
    return [(m["sources"], m["body"], body(m)) for m in BLOCK.finditer(text)]


def synced(text: str) -> str:
    def write(m: re.Match[str]) -> str:
        i = m["indent"]
        return f"{i}<!-- code: {m['sources']} -->\n{i}{m['fence']}\n{body(m)}{i}```"

    return BLOCK.sub(write, text)


def main() -> None:
    changed = []
    for page in pages():
        text = page.read_text()
        new = synced(text)
        if new != text:
            page.write_text(new)
            changed.append(str(page.relative_to(ROOT)))
    print("\n".join(changed) or "every copied block is current")


if __name__ == "__main__":
    sys.exit(main())
