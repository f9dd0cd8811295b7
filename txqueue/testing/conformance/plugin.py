"""The conformance suite's pytest plugin: the ``s`` and ``db_url`` fixtures, and
``store_kinds``, which makes the ``store_kind`` fixture that runs each test once per store
declared (the marker ``unsupported`` is registered by txqueue's own plugin, which pytest
loads before any test module imports the suite).

Load it with ``pytest_plugins = ["txqueue.testing.conformance.plugin"]`` in the
top-level conftest.py, beside ``store_kind = store_kinds(MY_STORE)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from ..clock import Clock
from .case import StoreCase
from .kind import StoreKind

UNSUPPORTED = "unsupported on the "
"""How every skip of the suite's starts: a behaviour the store declared it cannot offer."""


def unsupported(kind: StoreKind, item: pytest.Item) -> str | None:
    """Why ``kind`` cannot run the test ``item``, as its skip says it; None: it can."""
    marker = item.get_closest_marker("unsupported")
    why = None if marker is None else marker.kwargs.get(kind.name)
    if why is None and isinstance(item, pytest.Function):
        why = kind.gaps.get(item.originalname)
    return None if why is None else f"{UNSUPPORTED}{kind.name} store: {why}"


def store_kinds(*kinds: StoreKind) -> Callable[..., StoreKind]:
    """The ``store_kind`` fixture: each of ``kinds`` in turn (the test ids are their
    names), a test the kind cannot run skipped with its reason. Assign it to the name
    ``store_kind`` in a conftest.py."""

    @pytest.fixture(params=kinds, ids=[kind.name for kind in kinds])
    def store_kind(request: pytest.FixtureRequest) -> StoreKind:
        kind: StoreKind = request.param
        reason = unsupported(kind, request.node)
        if reason is not None:
            pytest.skip(reason)
        return kind

    return store_kind


@pytest.fixture
def db_url(store_kind: StoreKind, request: pytest.FixtureRequest) -> str:
    """A fresh database of each store in turn, from the kind's ``url_fixture``."""
    return str(request.getfixturevalue(store_kind.url_fixture))


@pytest.fixture
def s(store_kind: StoreKind, db_url: str) -> Iterator[StoreCase]:
    """The store of ``store_kind`` on a fresh database: what every test of the suite takes."""
    store = store_kind.store
    clock = Clock(db_url, store=store)  # before any connection: sessions keep their clock
    case = StoreCase(store_kind, db_url, store, store.connect(db_url), clock)
    try:
        yield case
    finally:
        case.close()
        clock.reset()
