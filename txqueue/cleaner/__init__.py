"""The cleaner: every committed task runs (lost wake-ups sent again), dead workers'
tasks are taken back, old ones pruned; and the report of each of its passes."""
