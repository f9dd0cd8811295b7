"""Typed tasks: handlers registered in a ``Registry`` with their settings, a handler's
signature as its task's schema and the codecs of its arguments, and what a handler is given
while it runs (its ``TaskContext``, its progress)."""
