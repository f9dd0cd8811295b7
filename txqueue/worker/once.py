"""Saying a lasting condition once: the worker's loops meet it again at every look, and
their log must not repeat it each time."""

from __future__ import annotations


class Once:
    """The names already told of."""

    def __init__(self) -> None:
        self._told: set[str] = set()

    def first(self, name: str) -> bool:
        """True the first time ``name`` is given, False ever after."""
        if name in self._told:
            return False
        self._told.add(name)
        return True
