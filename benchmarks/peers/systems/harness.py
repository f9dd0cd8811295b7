"""What every system's module shares: the handler's one act, and the producer's command line.

Imported by the workers and producers of each system, in that system's own virtualenv, so
it uses the standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

BATCH = 1000  # tasks per transaction (or per batch call) for the drain's backlog
BURN = 2_000_000  # a CPU-bound task's loop: about 100 ms of pure Python on the machine here
ENDED = 10_000_000  # a CPU-bound task i stamps ENDED + i when it is done

_out: tuple[int, int] | None = None  # (pid, fd): a forked child must open its own


def stamp(index: int) -> None:
    """The whole handler: one line, the task's index and when the handler started.

    One file per process, one write() per line, so that threads and processes never
    interleave their lines; the file stays open, as opening it per task would cost more
    than the rest of the handler. Two threads racing through the first call may both
    open it: both descriptors append to the same file.
    """
    started = time.time()
    global _out
    pid = os.getpid()
    if _out is None or _out[0] != pid:
        path = os.path.join(os.environ["PEERS_STAMPS"], f"{pid}.stamps")
        _out = (pid, os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    os.write(_out[1], f"{index} {started!r}\n".encode())


def burn(index: int) -> None:
    """The CPU-bound handler: ``BURN`` steps of pure Python (the GIL held throughout),
    stamped as it starts and ends."""
    stamp(index)
    total = 0
    for k in range(BURN):
        total += k * k
    stamp(ENDED + index)


def produce(
    batch: Callable[[Sequence[int]], None],
    one: Callable[[int], None],
    argv: Sequence[str] | None = None,
    chain: Callable[[int], None] | None = None,
    fan_in: Callable[[int], None] | None = None,
    burns: Callable[[Sequence[int]], None] | None = None,
) -> None:
    """The producer's jobs, as the runner asks for them:

    - ``drain N``: tasks 0..N-1, committed in batches before any worker runs;
    - ``latency N RATE FIRST``: tasks FIRST..FIRST+N-1 at RATE a second, one per
      transaction (or send); prints each index with the time its commit returned;
    - ``chain N``: one chain of N steps, the system's own (``chain``): step i, given i
      by the step before it, stamps i and hands on i + 1;
    - ``cpu N``: N CPU-bound tasks (``burn``), committed in batches (``burns``);
    - ``fanin N``: N parts (part i stamps i and returns it) joined by one task that stamps
      N once they have all succeeded, given their results, the system's own (``fan_in``);
      prints when its commit (or send) returned.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[0] == "fanin":
        if fan_in is None:
            raise SystemExit("this system has no joins")
        fan_in(int(args[1]))
        print(repr(time.time()), flush=True)
        return
    if args[0] == "chain":
        if chain is None:
            raise SystemExit("this system has no chains")
        chain(int(args[1]))
        return
    if args[0] == "cpu":
        if burns is None:
            raise SystemExit("this system has no CPU-bound task")
        n = int(args[1])
        for start in range(0, n, BATCH):
            burns(range(start, min(n, start + BATCH)))
        return
    if args[0] == "drain":
        n = int(args[1])
        for start in range(0, n, BATCH):
            batch(range(start, min(n, start + BATCH)))
        return
    n, rate, first = int(args[1]), float(args[2]), int(args[3])
    committed = []
    next_at = time.monotonic()
    for index in range(first, first + n):
        one(index)
        committed.append((index, time.time()))
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))
    print("\n".join(f"{index} {at!r}" for index, at in committed), flush=True)
