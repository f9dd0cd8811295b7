"""What the demo measured, and its progress as it runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    pending: int
    running: int
    succeeded: int
    failed: int
    phase: str
    elapsed: float


@dataclass
class DemoReport:
    """What the demo did and measured; ``rows`` is the summary table."""

    database: str
    broker: str | None
    committed: int = 0
    succeeded: int = 0
    failed: int = 0
    retries: int = 0
    alerts: int = 0
    seconds: float = 0.0
    drain_per_second: float = 0.0
    latency_ms: tuple[float, float] = (0.0, 0.0)  # p50, p99
    delayed: int = 0
    delayed_early: int = 0
    ran_twice: int = 0
    rolled_back_ran: bool = False
    rolled_back_row: bool = False
    cleaner: str = ""
    steady_rate: float = 0.0  # tasks per second in the latency phase

    @property
    def ok(self) -> bool:
        return (
            self.succeeded + self.failed == self.committed
            and not self.delayed_early
            and not self.ran_twice
            and not (self.rolled_back_ran or self.rolled_back_row)
        )

    def rows(self) -> list[tuple[str, str]]:
        never = (
            "never ran, no row"
            if not (self.rolled_back_ran or self.rolled_back_row)
            else ("RAN OR LEFT A ROW")
        )
        return [
            ("database", self.database),
            ("wake-ups", self.broker or "in-process (no broker), idle poll every 100 ms"),
            ("tasks committed", f"{self.committed:,}"),
            ("succeeded", f"{self.succeeded:,}"),
            ("failed for good (by design)", f"{self.failed} ({self.alerts} on_failed alerts)"),
            ("retries", f"{self.retries}"),
            ("drain throughput", f"{self.drain_per_second:,.0f} tasks/s"),
            (
                f"commit-to-start at {self.steady_rate:.0f}/s",
                f"p50 {self.latency_ms[0]:.1f} ms, p99 {self.latency_ms[1]:.1f} ms",
            ),
            ("delayed tasks started early", f"{self.delayed_early} of {self.delayed}"),
            ("tasks run twice", f"{self.ran_twice}"),
            ("rolled-back transaction's task", never),
            ("cleaner", self.cleaner),
            ("total time", f"{self.seconds:.1f} s"),
        ]
