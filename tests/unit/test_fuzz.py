"""Every edge that parses input, fuzzed: whatever arrives, the parser answers with a value
or txqueue's own error naming what is wrong, never another exception (which would stop a
consumer on a poisoned message, or print a traceback to a CLI user)."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import hypothesis.strategies as st
import pytest
from hypothesis import example, given, settings

from txqueue.core.limits import parse_rate
from txqueue.errors import TxQueueError
from txqueue.outbox import wakeup
from txqueue.tasks.hints import codec_for
from txqueue.units import MAX_DURATION, duration, size

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
WAKEUP_KEYS = st.sampled_from(["id", "ids", "xid", "ripe", "other"])
ALMOST_WAKEUPS = st.dictionaries(
    WAKEUP_KEYS, JSON | st.uuids().map(str) | st.lists(st.uuids().map(str), max_size=3)
)
SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(
    body=st.binary()
    | JSON.map(lambda d: json.dumps(d).encode())
    | ALMOST_WAKEUPS.map(lambda d: json.dumps(d).encode())
)
@example(body=b"[" * 100_000)  # nested past Python's recursion limit
@example(body=b'{"id": ' + b"[" * 100_000)
@example(body=b'{"ids": [' + b'"' + b"0" * 5000 + b'"]}')
def test_a_wakeup_message_is_read_or_refused_with_a_reason(body: bytes) -> None:
    try:
        wakeups = wakeup.decode(body)
    except ValueError as exc:
        assert str(exc)  # the consumer logs why, acks and drops it
        return
    assert wakeups and all(isinstance(w.id, uuid.UUID) for w in wakeups)


@SETTINGS
@given(
    ids=st.lists(st.uuids(), min_size=1, max_size=wakeup.MAX_IDS),
    xid=st.none() | st.integers(0, 2**63).map(str),
    ripe=st.booleans(),
)
def test_a_wakeup_message_comes_back_as_it_was_sent(
    ids: list[uuid.UUID], xid: str | None, ripe: bool
) -> None:
    body = wakeup.encode(ids[0], xid, ripe) if len(ids) == 1 else wakeup.encode_many(ids, xid, ripe)
    assert [(w.id, w.xid, w.ripe) for w in wakeup.decode(body)] == [(i, xid, ripe) for i in ids]


TEXTS = st.text() | st.from_regex(r"\s*-?[0-9.e+_]{0,12}\s*[smhdkgib]{0,3}\s*", fullmatch=True)


@SETTINGS
@given(value=TEXTS | st.floats() | st.integers())
@example(value="1e15")  # a traceback of `txqueue history --since` before the bound
def test_a_duration_is_seconds_within_a_century_or_a_config_error(value: Any) -> None:
    try:
        seconds = duration(value, "--since")
    except TxQueueError as exc:
        assert "--since" in str(exc)
        return
    assert 0 <= seconds <= MAX_DURATION and not math.isnan(seconds)
    assert datetime.now(UTC) - timedelta(seconds=seconds) < datetime.now(UTC) + timedelta(1)


@SETTINGS
@given(value=TEXTS | st.integers())
def test_a_size_is_bytes_or_a_config_error(value: Any) -> None:
    try:
        count = size(value, "--memory-limit")
    except TxQueueError as exc:
        assert "--memory-limit" in str(exc)
        return
    assert 0 < count < 2**63


@SETTINGS
@given(value=st.text() | st.from_regex(r"[0-9]{1,8}/[0-9.]{0,6}(s|sec|min|h|hour|day|d)?"))
def test_a_rate_is_starts_per_period_or_an_error_naming_the_field(value: str) -> None:
    try:
        starts, period = parse_rate(value)
    except TxQueueError as exc:
        assert "rate_limit" in str(exc)
        return
    assert starts >= 1 and period > 0


@pytest.mark.parametrize(
    "annotation",
    [int, float, str, bool, list[int], dict[str, float], tuple[int, str], Literal["a", "b"]],
    ids=str,
)
@settings(max_examples=100, deadline=None)
@given(value=JSON)
def test_a_stored_argument_is_read_back_or_refused_by_name(annotation: Any, value: Any) -> None:
    codec = codec_for(annotation, "f")
    try:
        codec.load(value, "f.x")
    except TxQueueError as exc:
        assert "f.x" in str(exc)
