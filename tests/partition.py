"""The suite in two parts: what needs RabbitMQ, and everything else.

``--without-rabbitmq`` runs only the tests that do not need RabbitMQ, for a team that
never runs it; ``--only-rabbitmq`` runs the rest. ``bash tests/run`` runs the first part
and then the second, so every run proves the first passes without a broker: in it the
tests are given an address where no broker listens (tests/conftest.py's ``services``).

A test needs RabbitMQ when it takes the ``amqp_url`` fixture, or is marked
``@pytest.mark.rabbitmq`` (a parameter set with ``pytest.param(..., marks=RABBITMQ)``).
What a part leaves out is not skipped: it is deselected, and counted on one line.
"""

from __future__ import annotations

import pytest

RABBITMQ = pytest.mark.rabbitmq
LEFT_OUT = "txqueue_left_out"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("txqueue")
    group.addoption(
        "--without-rabbitmq",
        action="store_true",
        help="run only the tests that do not need RabbitMQ (PostgreSQL and SQLite alone)",
    )
    group.addoption(
        "--only-rabbitmq",
        action="store_true",
        help="run only the tests that need RabbitMQ (the rest of --without-rabbitmq's)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rabbitmq: the test needs RabbitMQ (left out by --without-rabbitmq)"
    )
    if without_rabbitmq(config) and config.getoption("--only-rabbitmq"):
        raise pytest.UsageError("--without-rabbitmq and --only-rabbitmq exclude each other")


def without_rabbitmq(config: pytest.Config) -> bool:
    return bool(config.getoption("--without-rabbitmq"))


def needs_rabbitmq(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return "amqp_url" in fixtures or item.get_closest_marker("rabbitmq") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = bool(config.getoption("--only-rabbitmq"))
    if not (only or without_rabbitmq(config)):
        return
    kept = [item for item in items if needs_rabbitmq(item) == only]
    left = [item for item in items if needs_rabbitmq(item) != only]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    config.stash[_left_key] = len(left)
    if hasattr(config, "workeroutput"):  # an xdist worker: its controller prints the line
        config.workeroutput[LEFT_OUT] = len(left)


_left_key = pytest.StashKey[int]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In the xdist controller: each worker collected the same tests; keep its count."""
    left = getattr(node, "workeroutput", {}).get(LEFT_OUT)
    if left is not None:
        node.config.stash[_left_key] = left  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    left = config.stash.get(_left_key, None)
    if left is None:
        return
    if config.getoption("--only-rabbitmq"):
        why = "they do not need RabbitMQ: run with --without-rabbitmq"
    else:
        why = "they need RabbitMQ (--without-rabbitmq): run without it to include them"
    terminalreporter.write_line(f"left out by choice, not skipped: {left} tests, as {why}")
