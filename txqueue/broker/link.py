"""What the publisher, the consumer and the admin calls share: connection parameters,
the queues' declared arguments, the reconnect backoff, and one line saying why RabbitMQ is
unreachable or refused a declaration or a login."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pika
import pika.exceptions

from ..backoff import reconnect_delay
from ..config import QUEUE_TYPE_ENV, amqp_nodes
from ..errors import BrokerLoginError
from ..redaction import redact, scrub

# pika logs every failed connection attempt at ERROR, with stack details; txqueue reports
# each outage once, in one line, itself.
logging.getLogger("pika").setLevel(logging.CRITICAL)
log = logging.getLogger("txqueue.broker")


HEARTBEAT = 5
"""Seconds. RabbitMQ drops a connection silent for two to three times this (a cut-off or
frozen worker's: 10 to 15 s), and redelivers its unacked wake-ups to the other workers.
A URL's ``?heartbeat=`` overrides it."""


def parameters(url: str, *, heartbeat: bool = True) -> pika.URLParameters:
    """One attempt per connect, failing within seconds: each caller retries its own way."""
    params = pika.URLParameters(url)
    if heartbeat and "heartbeat" not in parse_qs(urlsplit(url).query):
        params.heartbeat = HEARTBEAT
    params.connection_attempts = 1
    params.socket_timeout = 5
    return params


class Nodes:
    """The nodes of the URL (one, or a cluster's, comma-separated), tried in turn from the
    first: a lost or refused connection goes on to the next node at once, and only a whole
    round of failures waits (``delay``)."""

    def __init__(self, url: str) -> None:
        self.urls = amqp_nodes(url)
        self._parameters: dict[int, pika.URLParameters] = {}
        self._next = 0

    def next(self) -> tuple[str, pika.URLParameters]:
        """The URL of the node to connect to now, and its parameters. Those are made once
        per node: pika reads the files ``ssl_options`` names as it makes them (OSError if
        one is missing), and a file moved later should not stop a part reconnecting."""
        at = self._next % len(self.urls)
        self._next += 1
        if at not in self._parameters:
            self._parameters[at] = parameters(self.urls[at])
        return self.urls[at], self._parameters[at]

    def delay(self, failures: int) -> float:
        """The wait before the next attempt, after ``failures`` failures in a row."""
        rounds, within = divmod(failures, len(self.urls))
        return 0.0 if within else retry_delay(rounds)


def queue_arguments(queue_type: str, server: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments txqueue declares its queues with; none for a classic queue, as before
    queue types existed, so that queues declared then still match.

    A quorum queue gets no delivery limit on RabbitMQ 4 and later, where the default of 20
    would drop a wake-up redelivered that often (a worker crashing in a loop) while its task
    waits. RabbitMQ 3 sets no limit unless asked, and has no value meaning "unlimited".
    """
    if queue_type != "quorum":
        return {}
    arguments: dict[str, Any] = {"x-queue-type": "quorum"}
    version = (server or {}).get("version", b"")
    text = version.decode() if isinstance(version, bytes) else str(version)
    major = re.match(r"\d+", text)
    if major and int(major.group()) >= 4:
        arguments["x-delivery-limit"] = -1
    return arguments


_INEQUIVALENT = re.compile(r"inequivalent arg '([^']*)' for queue '([^']*)'")
_explained: set[tuple[str, str]] = set()
_explained_lock = threading.Lock()


def foreign_queue(exc: BaseException, queue_type: str) -> str | None:
    """The queue whose declaration RabbitMQ refused because it exists with other arguments
    (another type, most often), or None when ``exc`` is something else. The first refusal
    of each queue and argument in a process is logged with what to do; the caller goes on
    with the queue as it is, since its wake-ups are only hints."""
    if not isinstance(exc, pika.exceptions.ChannelClosedByBroker) or exc.reply_code != 406:
        return None
    found = _INEQUIVALENT.search(exc.reply_text)
    if found is None:
        return None
    argument, queue = found.groups()
    with _explained_lock:
        if (queue, argument) in _explained:
            return queue
        _explained.add((queue, argument))
    log.error(
        "RabbitMQ queue %s exists with another %s than %s=%s declares: using it as it is. "
        "A queue's type cannot change in place; to change it, delete the queue "
        "(rabbitmqctl delete_queue %s) and it is declared anew. Only wake-ups are lost "
        "with it: the workers' poll and the cleaner find every pending task.",
        queue,
        argument,
        QUEUE_TYPE_ENV,
        queue_type,
        queue,
    )
    return queue


def retry_delay(failures: int) -> float:
    """Between reconnects to RabbitMQ; workers poll meanwhile, so it may grow long."""
    return reconnect_delay(failures, first=0.4, cap=15.0)


def refused_login(exc: BaseException, url: str) -> BrokerLoginError | None:
    """The error to report when ``exc`` is RabbitMQ refusing the URL's user or password
    (ACCESS_REFUSED, 403), which no reconnect mends; None for anything else. pika raises a
    ProbableAuthenticationError quoting the broker's reply as text, and the same for a
    connection merely lost while logging in, which quotes no 403 and stays an outage."""
    if isinstance(exc, pika.exceptions.ConnectionClosedByBroker):
        refused = exc.reply_code == 403
    else:
        refused = isinstance(exc, pika.exceptions.ProbableAuthenticationError) and (
            "(403)" in str(exc)
        )
    if not refused:
        return None
    return BrokerLoginError(
        f"RabbitMQ at {redact(url)} refused the login (ACCESS_REFUSED): check the user and "
        "password in the AMQP URL"
    )


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
