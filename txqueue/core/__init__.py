"""A task's data and the rules of its life, with no I/O: ``Task`` and ``TaskInfo``, every
decision about a task's next state (``lifecycle``), the checks of the values txqueue takes,
flow-control values, ids, and the error history."""
