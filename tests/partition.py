"""Which tests need RabbitMQ, for the suite to run without it.

``--without-rabbitmq`` runs only the tests that do not need RabbitMQ, for a team that
never runs it: what it leaves out is not skipped but deselected, and counted on one line.
In every run, with or without the option, a test that does not need RabbitMQ is given an
address where no broker listens (tests/conftest.py's ``services``), so every run proves
that those tests pass on a machine without one.

A test needs RabbitMQ when it takes the ``amqp_url`` fixture, or is marked
``@pytest.mark.rabbitmq`` (a parameter set with ``pytest.param(..., marks=RABBITMQ)``);
the first are marked here at collection, so the mark alone says it.
"""

from __future__ import annotations

import pytest

RABBITMQ = pytest.mark.rabbitmq
LEFT_OUT = "txqueue_left_out"
_left_key = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("txqueue").addoption(
        "--without-rabbitmq",
        action="store_true",
        help="run only the tests that do not need RabbitMQ (PostgreSQL and SQLite alone)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rabbitmq: the test needs RabbitMQ (left out by --without-rabbitmq)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "amqp_url" in getattr(item, "fixturenames", ()):
            item.add_marker(RABBITMQ)
    if not config.getoption("--without-rabbitmq"):
        return
    left = [item for item in items if item.get_closest_marker("rabbitmq")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("rabbitmq")]
    config.stash[_left_key] = len(left)
    if hasattr(config, "workeroutput"):  # an xdist worker: its controller prints the line
        config.workeroutput[LEFT_OUT] = len(left)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In the xdist controller: each worker collected the same tests; keep its count."""
    left = getattr(node, "workeroutput", {}).get(LEFT_OUT)
    if left is not None:
        node.config.stash[_left_key] = left  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(_left_key, None)
    if left is not None:
        terminalreporter.write_line(
            f"left out by choice, not skipped: {left} tests, as they need RabbitMQ "
            "(--without-rabbitmq): run without it to include them"
        )
