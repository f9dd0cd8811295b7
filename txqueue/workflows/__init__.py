"""Workflows: steps and their edges declared in Python, written in the caller's
transaction, and read, awaited and cancelled as stored, with the rules of when a step may run."""
