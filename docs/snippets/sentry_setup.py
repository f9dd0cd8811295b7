"""Sentry in the module that defines your tasks (docs/how-to/tracing.md); the test of
txqueue[sentry] runs it."""

from __future__ import annotations

import os

# --8<-- [start:init]
import sentry_sdk

from txqueue.contrib.sentry import TxQueueIntegration

sentry_sdk.init(
    dsn=os.environ.get("SENTRY_DSN"),  # none: Sentry stays off
    integrations=[TxQueueIntegration()],
    traces_sample_rate=0.1,  # a transaction for one attempt in ten; 0 or unset: none
)
# --8<-- [end:init]
