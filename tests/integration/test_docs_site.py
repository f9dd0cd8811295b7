"""The documentation site built with the network off, and its diagrams drawn in Chromium
from the site alone: every request the page makes goes to the site's own server."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Route, sync_playwright

from .test_dashboard_browser import browsing

ROOT = Path(__file__).resolve().parents[2]


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(folder: Path) -> Iterator[str]:
    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_site_builds_offline_and_draws_its_diagrams_from_itself(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.fail("no unshare: apt-get install util-linux")
    site = tmp_path / "site"
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    built = subprocess.run(
        ["unshare", "--net", *mkdocs, "--site-dir", str(site)],  # no network at all
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    elsewhere: list[str] = []

    def local_only(route: Route) -> None:
        if route.request.url.startswith("http://127.0.0.1:"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    diagrams = {
        page: re.findall(r"```mermaid\n(.*?)```", page.read_text(), re.S)
        for page in sorted((ROOT / "docs").rglob("*.md"))
    }
    diagrams = {page: found for page, found in diagrams.items() if found}
    assert sum(map(len, diagrams.values())) >= 5, diagrams
    with serving(site) as base, sync_playwright() as pw, browsing(pw) as (page, problems):
        page.route("**/*", local_only)
        for source, found in diagrams.items():
            url = source.relative_to(ROOT / "docs").with_suffix("").as_posix()
            page.goto(f"{base}/{url.removesuffix('index')}/")
            # The theme draws each diagram into a closed shadow root, in a div that
            # replaces the block of its source: once drawn, no source is left, and each
            # drawing has a size. Mermaid's own parser says each source is valid.
            page.locator("div.mermaid").nth(len(found) - 1).wait_for(timeout=15_000)
            assert page.locator("pre.mermaid").count() == 0, url
            for i, text in enumerate(found):
                box = page.locator("div.mermaid").nth(i).bounding_box()
                assert box is not None and box["height"] > 50, (url, i, box)
                page.evaluate("text => mermaid.parse(text)", text)
        assert elsewhere == [] and problems == []
