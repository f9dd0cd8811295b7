"""The store conformance suite: every behaviour txqueue asks of a store, as pytest tests
that call the store's methods directly, run on txqueue's PostgreSQL and SQLite stores and
importable by the author of a third store to run on theirs.

A store is declared once, as a ``StoreKind`` (its fresh databases, an application's
connection, its rows, its errors, its traits and the tests it cannot pass). Then, in the
top-level conftest.py::

    pytest_plugins = ["txqueue.testing.conformance.plugin"]
    store_kind = store_kinds(MY_STORE)

and in a test module, the suite's tests::

    from txqueue.testing.conformance.suite import *  # noqa: F403

It needs pytest (``pip install 'txqueue[testing]'``).
"""

try:
    import pytest
except ImportError:  # the extra is not installed
    from ...errors import ConfigError

    raise ConfigError(
        "txqueue.testing.conformance needs pytest: pip install 'txqueue[testing]'"
    ) from None

# Before the suite's modules are imported: their asserts then explain a failure as a
# test module's do.
pytest.register_assert_rewrite(*(f"{__name__}.{m}" for m in ("case", "plugin", "suite")))

from .case import WORKER, StoreCase, defaults, finish, near, select  # noqa: E402
from .kind import StoreKind  # noqa: E402
from .plugin import UNSUPPORTED, store_kinds, unsupported  # noqa: E402

__all__ = [
    "UNSUPPORTED",
    "WORKER",
    "StoreCase",
    "StoreKind",
    "defaults",
    "finish",
    "near",
    "select",
    "store_kinds",
    "unsupported",
]
