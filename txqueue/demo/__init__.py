"""``txqueue demo``: the whole system at work on a realistic mix of tasks, and measured.

Workers and a cleaner run in this process against a throwaway SQLite file (or the
configured databases) while a producer commits business transactions: a burst to drain,
tasks that fail once, tasks that always fail, delayed tasks, one transaction that rolls
back, then a steady stream whose commit-to-start latency is timed.
"""

from .report import DemoReport, Progress
from .run import Demo, DemoError

__all__ = ["Demo", "DemoError", "DemoReport", "Progress"]
