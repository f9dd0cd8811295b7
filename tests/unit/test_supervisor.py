"""Supervised parts, without services: restarts, and a stop that says what is still running."""

from __future__ import annotations

import threading

from txqueue.worker.supervisor import Loop, Supervisor


def test_a_part_still_running_past_its_join_says_where() -> None:
    waiting, release = threading.Event(), threading.Event()

    def stuck_in_a_write() -> None:
        waiting.set()
        release.wait(30)

    part = Loop("txqueue-recorder", stuck_in_a_write)
    part.start(Supervisor(on_failure=lambda: None))
    assert waiting.wait(10)
    try:
        where = part.join(timeout=0.1)
        assert where is not None and "stuck_in_a_write" not in where  # not txqueue's frame
        assert "waiting in wait" in where and "supervisor.py" in where, where
    finally:
        release.set()
    assert part.join(timeout=5) is None


def test_parts_waiting_for_their_restart_are_read_while_they_change() -> None:
    supervisor = Supervisor(on_failure=lambda: None)
    deaths = iter(range(3))

    def dies_twice() -> None:
        if next(deaths) < 2:
            raise RuntimeError("boom")

    seen: set[str] = set()
    thread = threading.Thread(target=supervisor.run, args=("txqueue-consumer", dies_twice))
    thread.start()
    while thread.is_alive():
        seen.update(supervisor.restarting())
    thread.join()
    assert seen == {"txqueue-consumer"} and supervisor.restarting() == []
    assert supervisor.failure is None
