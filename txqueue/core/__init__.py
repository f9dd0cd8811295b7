"""A task's data and the rules of its life, with no I/O: ``Task`` and ``TaskInfo``, every
decision about a task's next state (``lifecycle``), the checks of the values txqueue takes,
flow-control values, ids, the error history, and the plans that write an operation once for
sync and asyncio callers."""
