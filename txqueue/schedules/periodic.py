"""Periodic tasks: a cron expression in a time zone, and which of its slots are due.

The slots are read by cronsim (the ``periodic`` extra), in the schedule's time zone, so
that "0 3 * * *" means 03:00 where the schedule lives, across daylight-saving changes.
Times come in and go out as UTC datetimes from the database's clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..core.fields import check_name, check_queue
from ..core.task import Task
from ..errors import ConfigError, InvalidTypeError, InvalidValueError

CATCH_UP_LIMIT: Final = 1000
"""The most slots one catch-up enqueues: the newest ones, once a schedule comes back."""


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:
        raise ConfigError(
            "periodic tasks need the cron parser: pip install 'txqueue[periodic]'"
        ) from None
    return cronsim


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic task: ``task`` (with ``payload``, on ``queue``) at each slot of ``cron``.

    ``cron`` has five fields (minute hour day-of-month month day-of-week) or six, the
    first being seconds. ``catch_up``: after a time with no worker running, enqueue every
    missed slot (up to ``CATCH_UP_LIMIT``) instead of the latest one alone.
    """

    name: str
    cron: str
    task: str
    queue: str
    payload: Any = None
    timezone: str = "UTC"
    catch_up: bool = False
    concurrency_key: str | None = None  # the task's key, for a fair-share queue
    zone: tzinfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        check_name(self.task, "task")
        if not isinstance(self.cron, str):
            raise InvalidTypeError("cron", "must be a str")
        if not isinstance(self.timezone, str):
            raise InvalidTypeError("timezone", "must be a str such as 'UTC' or 'Europe/Paris'")
        if not isinstance(self.catch_up, bool):
            raise InvalidTypeError("catch_up", "must be a bool")
        check_queue(self.queue)
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidValueError("timezone", f"unknown time zone {self.timezone!r}") from None
        object.__setattr__(self, "zone", zone)
        cronsim = _cronsim()
        try:
            # The first slot is read to catch expressions that never match (February 30th).
            next(cronsim.CronSim(self.cron, datetime.now(zone)))
        except (cronsim.CronSimError, StopIteration) as exc:
            raise InvalidValueError("cron", f"{self.cron!r}: {exc or 'never matches'}") from None
        self.enqueued(datetime.now(UTC))  # the payload must be storable

    def _slots(self, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
        for slot in _cronsim().CronSim(self.cron, start.astimezone(self.zone), reverse=reverse):
            yield slot.astimezone(UTC)

    def _back_from(self, moment: datetime) -> Iterator[datetime]:
        """Slots at or before ``moment``, newest first."""
        # Going back, cronsim counts the start itself only when it has a fraction of a second.
        start = moment if moment.microsecond else moment.replace(microsecond=1)
        return self._slots(start, reverse=True)

    def latest(self, now: datetime) -> datetime:
        """The last slot at or before ``now``."""
        slot = next(self._back_from(now))
        # cronsim walks local wall time, which repeats an hour when clocks go back: there,
        # going back from the second pass can skip a slot of the first. Going forward
        # from where it landed finds it.
        while (following := self.next_after(slot)) <= now:
            slot = following
        return slot

    def next_after(self, moment: datetime) -> datetime:
        """The first slot after ``moment``."""
        # In a repeated hour cronsim can answer with a slot of the first pass: skip those.
        return next(slot for slot in self._slots(moment) if slot > moment)

    def due(self, last: datetime, now: datetime) -> list[datetime]:
        """The slots to enqueue now, oldest first, given the last one enqueued: none, the
        latest, or with ``catch_up`` each one missed since (the newest ``CATCH_UP_LIMIT``)."""
        missed: list[datetime] = []
        for slot in self._back_from(self.latest(now)):
            if slot <= last or len(missed) == (CATCH_UP_LIMIT if self.catch_up else 1):
                break
            missed.append(slot)
        return missed[::-1]

    def enqueued(self, slot: datetime) -> Task:
        """The task for one slot: ripe at the slot's time."""
        return Task(
            self.task,
            self.payload,
            queue=self.queue,
            run_at=slot,
            concurrency_key=self.concurrency_key,
        )
