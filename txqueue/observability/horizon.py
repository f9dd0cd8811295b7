"""The vacuum horizon, read: for how long what holds it back has held it, one line naming
the culprit, and one warning when that passes the threshold (and one when it clears).

Every claim and outcome leaves a dead row version behind, which vacuum removes only once
no transaction could still see it. A transaction held open anywhere in the database (an
idle session, a pg_dump, a standby's feedback, a slot, a forgotten prepared transaction)
stops that, and claims slow down as the dead rows pile up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC
from typing import Any

from ..core.times import iso_or_none
from ..errors import StoreError
from ..store.protocols import C, VacuumHorizon
from ..store.reports import HOLDER_PREPARED, HOLDER_SLOT, HorizonHolder

log = logging.getLogger("txqueue.horizon")

READ_EVERY = 60.0
"""Seconds between a worker's readings (the cleaner reads at each pass)."""
SEE = "see txqueue's docs, how-to/vacuum-horizon.md"


@dataclass(frozen=True, slots=True)
class Horizon:
    """What holds the horizon back (None: nothing) and for how many seconds. ``at_least``:
    the database keeps no time for it (a slot, a walsender, another user's session seen
    without pg_monitor), so ``seconds`` counts from when this process first saw it holding
    that same xmin, a lower bound."""

    holder: HorizonHolder | None = None
    seconds: float = 0.0
    at_least: bool = False

    def past(self, threshold: float) -> bool:
        """Held back for ``threshold`` seconds or more (never, for a threshold of 0)."""
        return threshold > 0 and self.holder is not None and self.seconds >= threshold

    def describe(self) -> str:
        """One line naming the culprit, for logs, ``txqueue status`` and the dashboard."""
        h = self.holder
        if h is None:
            return "nothing holds it back"
        if h.kind == HOLDER_SLOT:
            state = "inactive" if not h.active else "active" + (f", pid {h.pid}" if h.pid else "")
            return f"replication slot {h.name!r} ({state}) holding xmin {self._held()}"
        if h.kind == HOLDER_PREPARED:
            return f"prepared transaction {h.name!r} (owner {h.user}) {self._since()}"
        who = [h.application or "no application name"]
        who += [f"user {h.user}"] if h.user else []
        who += [f"from {h.client}"] if h.client else []
        if h.since is not None:
            what = f"{h.state or 'in a transaction'}, open {self._since()}"
        elif h.backend_type == "walsender":
            what = f"walsender: a standby's feedback holding xmin {self._held()}"
        elif h.state is None and h.backend_type is None:
            what = f"details hidden without pg_monitor, holding xmin {self._held()}"
        else:
            what = f"{h.state or h.backend_type}, holding xmin {self._held()}"
        return f"pid {h.pid} ({', '.join(who)}, {what})"

    def as_dict(self, threshold: float) -> dict[str, Any]:
        """For ``--json``: the seconds, the line, the threshold, and the holder's fields."""
        holder = None if self.holder is None else asdict(self.holder)
        if holder is not None:
            holder["since"] = iso_or_none(holder["since"])
        return {
            "seconds": round(self.seconds, 3),
            "at_least": self.at_least,
            "past_threshold": self.past(threshold),
            "threshold_s": threshold,
            "description": self.describe(),
            "holder": holder,
        }

    def _since(self) -> str:
        assert self.holder is not None and self.holder.since is not None
        at = self.holder.since.astimezone(UTC).strftime("%H:%M:%S UTC")
        return f"since {at}, {span(self.seconds)}"

    def _held(self) -> str:
        assert self.holder is not None
        if self.at_least and self.seconds < 1:  # one reading: no time to tell
            return f"{self.holder.xid_age:,} transactions back"
        return f"for {'at least ' if self.at_least else ''}{span(self.seconds)}"


def estimate(holder: HorizonHolder | None, seen_for: float = 0.0) -> Horizon:
    """The reading as a ``Horizon``; ``seen_for``: seconds since this process first saw
    this holder holding this xmin, the age of what the database keeps no time for."""
    if holder is None:
        return Horizon()
    if holder.seconds is not None:
        return Horizon(holder, max(0.0, holder.seconds))
    return Horizon(holder, max(0.0, seen_for), at_least=True)


class Watch:
    """One process's readings over time: ``see`` each one, ``current`` is the last, and a
    warning goes to ``logger`` (None: silent) when the horizon passes ``threshold`` seconds
    and again when it clears, not at every reading. Safe to call from several threads."""

    def __init__(
        self,
        threshold: float,
        *,
        logger: logging.Logger | None = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.current = Horizon()
        self._logger, self._clock = logger, clock
        self._first: tuple[tuple[object, ...], float] | None = None  # (hold, first seen)
        self._warned = False
        self._lock = threading.Lock()

    def read(self, store: VacuumHorizon[C], conn: C) -> Horizon | None:
        """``see`` what ``store`` reads on ``conn``. A reading that fails is logged at debug
        and returns None: it is never worth failing the work around it (a lost connection
        is found by that work's next statement)."""
        try:
            holder = store.vacuum_horizon(conn)
        except StoreError as exc:
            log.debug("could not read the vacuum horizon: %s", exc)
            return None
        return self.see(holder)

    def see(self, holder: HorizonHolder | None) -> Horizon:
        with self._lock:
            now = self._clock()
            if holder is None:
                self._first = None
            else:
                hold = (holder.kind, holder.pid, holder.name, holder.xmin)
                if self._first is None or self._first[0] != hold:
                    self._first = (hold, now)
            seen_for = 0.0 if self._first is None else now - self._first[1]
            current = self.current = estimate(holder, seen_for)
            self._tell(current)
        return current

    def _tell(self, current: Horizon) -> None:
        past = current.past(self.threshold)
        if self._logger is not None and past != self._warned:
            if past:
                self._logger.warning(
                    "vacuum horizon held back past %s by %s: vacuum cannot remove dead rows "
                    "until it ends, and claims slow down as they pile up; %s",
                    span(self.threshold),
                    current.describe(),
                    SEE,
                )
            else:
                self._logger.warning(
                    "vacuum horizon no longer held back past %s (%s)",
                    span(self.threshold),
                    current.describe(),
                )
        self._warned = past


def span(seconds: float) -> str:
    """A duration as people say it: 42 s, 12 min, 2 h 5 min, 3 d 4 h."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
