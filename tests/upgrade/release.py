"""The previous release, built from its commit into a directory that ``PYTHONPATH`` puts
before this checkout, so that the current interpreter runs its code with the current venv's
psycopg, pika and typer (what a user upgrading in place has installed).

Built without the network: ``git archive`` of the commit, ``pip wheel`` with the venv's own
build backend (hatchling, in the test extras), ``pip install --target``. Kept per commit
under pytest's cache, so a rerun starts at once; made from nothing when the cache is empty.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The release the rehearsal upgrades from: its version, and the commit its tag names (the
# tag came later than the commit, so a clone may lack it: the sha stands in).
PREVIOUS = ("0.2.0", "8b3fedb61883900bcbff59a8b5c6f7621c2e5d91")

# What the wheel is built from: the package, its DDL and what its pyproject names.
SOURCES = ("pyproject.toml", "README.md", "schema.sql", "schema.sqlite.sql", "txqueue")


class ReleaseError(Exception):
    """The previous release cannot be had here; the message says what to do."""


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, timeout=60, check=False
    )


def commit() -> str:
    """The previous release's commit: its tag's, where the clone has the tag, else the
    recorded sha; a clone without that commit (a shallow one) is told how to fetch it."""
    version, sha = PREVIOUS
    tagged = _git("rev-parse", "--verify", "--quiet", f"refs/tags/v{version}^{{commit}}")
    if tagged.returncode == 0:
        found = tagged.stdout.decode().strip()
        if found != sha:
            raise ReleaseError(f"tag v{version} names {found}, not {sha} as tests/upgrade says")
    if _git("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
        raise ReleaseError(
            f"this clone lacks txqueue {version}'s commit {sha[:12]}: "
            "run `git fetch --unshallow --tags`"
        )
    return sha


def _run(*args: str, cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise ReleaseError(f"pip {args[0]} of the previous release failed: {' | '.join(tail)}")


def _build(sha: str, into: Path) -> None:
    if importlib.util.find_spec("hatchling") is None:
        raise ReleaseError(
            "building the previous release needs hatchling: pip install -e '.[test]'"
        )
    src, dist = into / "src", into / "dist"
    archived = _git("archive", "--format=tar", sha, *SOURCES)
    if archived.returncode != 0:
        raise ReleaseError(f"git archive {sha[:12]} failed: {archived.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as tar:
        tar.extractall(src, filter="data")
    # No build isolation: the backend comes from this venv, not from an index.
    _run("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dist), ".", cwd=src)
    (wheel,) = dist.glob("txqueue-*.whl")
    _run("install", "--no-deps", "--target", str(into / "site"), str(wheel), cwd=into)


def installed(cache: Path) -> Path:
    """The directory to put first on ``PYTHONPATH`` to run the previous release, built into
    ``cache`` once per commit. Two test processes building at once each build their own and
    the first rename wins: a half-built release is never seen."""
    sha = commit()
    site = cache / f"txqueue-{PREVIOUS[0]}-{sha}"
    if (site / "txqueue" / "__init__.py").is_file():
        return site
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        _build(sha, work)
        try:
            (work / "site").rename(site)
        except OSError:
            if not (site / "txqueue" / "__init__.py").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return site
