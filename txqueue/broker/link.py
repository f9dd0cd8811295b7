"""What the publisher, the consumer and the admin calls share: connection parameters,
the reconnect backoff, and one line saying why RabbitMQ is unreachable."""

from __future__ import annotations

import logging

import pika

from ..backoff import reconnect_delay
from ..config import scrub

# pika logs every failed connection attempt at ERROR, with stack details; txqueue reports
# each outage once, in one line, itself.
logging.getLogger("pika").setLevel(logging.CRITICAL)


def parameters(url: str, *, heartbeat: bool = True) -> pika.URLParameters:
    """One attempt per connect, failing within seconds: each caller retries its own way."""
    params = pika.URLParameters(url)
    if heartbeat:
        params.heartbeat = 30
    params.connection_attempts = 1
    params.socket_timeout = 5
    return params


def retry_delay(failures: int) -> float:
    """Between reconnects to RabbitMQ; workers poll meanwhile, so it may grow long."""
    return reconnect_delay(failures, first=0.4, cap=15.0)


def describe(exc: BaseException, url: str) -> str:
    """The real cause in one line: pika wraps it, often with an empty message of its own
    (AMQPConnectionError around the socket's "Connection refused")."""
    while True:
        inner = exc.args[0] if exc.args else getattr(exc, "exception", None)
        if not isinstance(inner, BaseException):
            break
        exc = inner
    text = str(exc).strip() or type(exc).__name__
    return scrub(text.splitlines()[0], url)
