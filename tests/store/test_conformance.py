"""The shipped store conformance suite, on txqueue's own stores: each of its tests runs
once per kind of ``tests/store/kinds.py`` (the ``store_kind`` of tests/conftest.py), as a
third store's author runs it on theirs (docs/how-to/third-store.md)."""

from txqueue.testing.conformance.suite import *  # noqa: F403
