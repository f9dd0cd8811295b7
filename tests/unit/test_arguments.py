"""A handler's signature as its task's schema: what an enqueue stores, what the worker
gives back, and the errors that name the argument at fault. No services."""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal, NewType, TypedDict

import pydantic
import pytest

import txqueue
from txqueue.tasks.arguments import Signature
from txqueue.tasks.codecs import jsonable


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int = 1
    price: Decimal = Decimal("0")


@dataclass
class Order:
    id: uuid.UUID
    lines: list[Line]
    placed: datetime
    color: Color | None = None
    tags: set[str] = field(default_factory=set)


class Address(TypedDict, total=False):
    street: str
    zip: str


@dataclass
class Node:
    name: str
    children: list[Node]


class Customer(pydantic.BaseModel):
    email: str
    vip: bool = False


Cents = NewType("Cents", int)


def everything(
    order: Order,
    when: date,
    at: time,
    wait: timedelta,
    address: Address,
    pair: tuple[int, str],
    many: tuple[float, ...],
    mode: Literal["fast", "slow"],
    amount: Cents,
    tree: Node,
    customer: Customer,
    note: str | None = None,
) -> None: ...


def roundtrip(fn: Any, *args: Any, **kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    signature = Signature(fn, fn.__name__, context=False)
    stored = json.loads(json.dumps(signature.dump(args, kwargs)))
    return signature.load(stored)


def test_every_supported_type_comes_back_as_it_was_given() -> None:
    order = Order(
        uuid.uuid4(),
        [Line("a", 2, Decimal("9.99")), Line("b")],
        datetime(2026, 11, 25, 9, 30, tzinfo=UTC),
        Color.BLUE,
        {"x"},
    )
    given = {
        "order": order,
        "when": date(2026, 1, 2),
        "at": time(8, 15),
        "wait": timedelta(minutes=90),
        "address": Address(street="Main"),
        "pair": (1, "one"),
        "many": (1.5, 2.0),
        "mode": "slow",
        "amount": Cents(250),
        "tree": Node("root", [Node("leaf", [])]),
        "customer": Customer(email="a@b.c"),
    }
    args, kwargs = roundtrip(everything, **given)
    assert args == [] and kwargs == given
    assert isinstance(kwargs["order"].lines[0].price, Decimal)


def test_what_is_stored_is_plain_json_a_producer_elsewhere_can_write() -> None:
    signature = Signature(everything, "everything", context=False)
    stored = signature.dump(
        (),
        {
            "order": Order(uuid.UUID(int=1), [], datetime(2026, 1, 1, tzinfo=UTC)),
            "when": date(2026, 1, 2),
            "at": time(8),
            "wait": timedelta(seconds=3),
            "address": {},
            "pair": (1, "a"),
            "many": (),
            "mode": "fast",
            "amount": 5,
            "tree": Node("n", []),
            "customer": Customer(email="e"),
        },
    )
    assert stored["order"] == {
        "id": "00000000-0000-0000-0000-000000000001",
        "lines": [],
        "placed": "2026-01-01T00:00:00+00:00",
        "color": None,
        "tags": [],
    }
    assert stored["wait"] == 3.0 and stored["when"] == "2026-01-02"
    assert stored["customer"] == {"email": "e", "vip": False}
    assert "note" not in stored  # not given: the handler's default applies when it runs


def send(order: int, note: str = "", *, urgent: bool = False) -> str:
    return f"{order}{note}{urgent}"


@pytest.mark.parametrize(
    ("args", "kwargs", "kind", "field_name"),
    [
        (("42",), {}, txqueue.InvalidTypeError, "order"),
        ((True,), {}, txqueue.InvalidTypeError, "order"),
        ((), {}, txqueue.InvalidValueError, "order"),
        ((1,), {"nope": 2}, txqueue.InvalidValueError, "nope"),
        ((1,), {"order": 2}, txqueue.InvalidValueError, "order"),
        ((1, "a", "b"), {}, txqueue.InvalidValueError, "arguments"),
        ((1,), {"urgent": "yes"}, txqueue.InvalidTypeError, "urgent"),
        ((1,), {"note": None}, txqueue.InvalidTypeError, "note"),
    ],
)
def test_a_wrong_missing_or_unknown_argument_is_named(
    args: tuple[Any, ...], kwargs: dict[str, Any], kind: type[Exception], field_name: str
) -> None:
    signature = Signature(send, "send", context=False)
    with pytest.raises(kind) as raised:
        signature.dump(args, kwargs)
    assert isinstance(raised.value, txqueue.ValidationError)
    assert raised.value.field == field_name


def place(order: Order, address: Address | None = None) -> None: ...


def test_a_nested_error_names_its_path() -> None:
    signature = Signature(place, "place", context=False)
    bad = Order(uuid.uuid4(), [Line("a"), Line("b", quantity="2")], datetime.now(UTC))  # type: ignore[arg-type]
    with pytest.raises(txqueue.InvalidTypeError, match=r"order\.lines\[1\]\.quantity: must be int"):
        signature.dump((bad,), {})
    good = Order(uuid.uuid4(), [], datetime.now(UTC))
    with pytest.raises(txqueue.InvalidValueError) as raised:
        signature.dump((good,), {"address": {"street": "x", "city": "y"}})
    assert raised.value.field == "address.city"
    with pytest.raises(txqueue.InvalidTypeError, match="address: must be Address or None"):
        signature.dump((good,), {"address": 5})


def test_what_the_worker_finds_wrong_fails_as_task_arguments_error() -> None:
    signature = Signature(send, "send", context=False)
    assert signature.load({"order": 1}) == ([], {"order": 1})
    for stored, culprit in [
        ({"order": "1"}, "order"),
        ({}, "order"),
        ({"order": 1, "extra": 2}, "extra"),
        ([1], "payload"),
    ]:
        with pytest.raises(txqueue.TaskArgumentsError) as raised:
            signature.load(stored)
        assert raised.value.field == culprit


def test_positional_only_and_variadic_arguments_go_back_by_position() -> None:
    def f(a: int, /, b: int, *rest: str, c: int = 0, **more: float) -> None: ...

    assert roundtrip(f, 1, 2, "x", "y", c=3, z=1.5) == ([1, 2, "x", "y"], {"c": 3, "z": 1.5})
    assert roundtrip(f, 1, b=2) == ([1, 2], {})
    with pytest.raises(txqueue.InvalidTypeError, match=r"rest\[0\]"):
        Signature(f, "f", context=False).dump((1, 2, 3), {})


def test_a_handler_of_one_payload_gets_the_stored_json_whole() -> None:
    def legacy(payload: dict[str, int]) -> None: ...

    signature = Signature(legacy, "legacy", context=False)
    assert signature.whole == "payload" and signature.context is None
    assert signature.dump(({"a": 1},), {}) == {"a": 1}
    assert signature.dump((), {}) is None  # Task's default payload, {}
    assert signature.load({"a": 1}) == ([{"a": 1}], {})
    with pytest.raises(txqueue.TaskArgumentsError, match=r"payload\['a'\]"):
        signature.load({"a": "x"})

    def untyped(data, ctx):  # type: ignore[no-untyped-def]
        ...

    signature = Signature(untyped, "untyped", context=False)
    assert signature.whole == "data" and signature.context == 1
    assert signature.load([1, "anything"]) == ([[1, "anything"]], {})
    assert Signature(list().append, "append", context=False).whole == "object"

    def one(order: int) -> None: ...

    assert Signature(one, "one", context=False).whole is None
    assert Signature(one, "one", context=False).dump((5,), {}) == {"order": 5}

    def add(a: int, b):  # type: ignore[no-untyped-def]
        ...

    # A typed first argument: the untyped second is an argument, not the original ctx.
    signature = Signature(add, "add", context=False)
    assert signature.context is None and signature.dump((1, [2]), {}) == {"a": 1, "b": [2]}


def test_the_context_goes_first_when_asked_for_and_never_into_the_payload() -> None:
    def typed(ctx: txqueue.TaskContext, order: int) -> None: ...

    signature = Signature(typed, "typed", context=True)
    assert signature.context == 0 and signature.whole is None
    assert signature.dump((7,), {}) == {"order": 7}
    with pytest.raises(txqueue.ConfigError, match="context=True"):
        Signature(typed, "typed", context=False)
    with pytest.raises(txqueue.ConfigError, match="first argument"):
        Signature(lambda *, a: None, "kw", context=True)


def test_a_context_declared_anywhere_but_first_is_named_with_the_fix() -> None:
    registry = txqueue.Registry()

    def report(day: str, *, ctx: txqueue.TaskContext) -> None: ...

    # Not the JSON codec's complaint about the context's fields: where it must go.
    message = "task 'report': .*'ctx'.* TaskContext must be the handler's first positional"
    with pytest.raises(txqueue.ConfigError, match=message):
        registry.task(context=True)(report)
    with pytest.raises(txqueue.ConfigError, match=message):
        registry.task()(report)


class Opaque:
    pass


def test_types_json_cannot_carry_are_refused_when_the_task_is_registered() -> None:
    def takes(thing: Opaque) -> None: ...

    def keyed(table: dict[int, str]) -> None: ...

    registry = txqueue.Registry()
    with pytest.raises(txqueue.ConfigError, match="cannot store Opaque"):
        registry.task()(takes)
    with pytest.raises(txqueue.ConfigError, match="keys are str"):
        registry.task()(keyed)


def test_results_are_stored_as_json_and_read_back_by_the_return_annotation() -> None:
    def make() -> Order: ...

    order = Order(uuid.uuid4(), [Line("a")], datetime(2026, 5, 1, tzinfo=UTC), Color.RED)
    stored = json.loads(json.dumps(jsonable(order)))
    assert Signature(make, "make", context=False).result(stored) == order
    assert jsonable({"a": (1, Decimal("2.5"), Customer(email="x"))}) == {
        "a": [1, "2.5", {"email": "x", "vip": False}]
    }


def test_a_pydantic_models_own_validation_names_the_argument() -> None:
    def signup(customer: Customer) -> None: ...

    signature = Signature(signup, "signup", context=False)
    with pytest.raises(txqueue.TaskArgumentsError) as raised:
        signature.load({"customer": {"vip": True}})
    assert raised.value.field == "customer" and "email" in str(raised.value)


def test_sequences_refuse_a_string() -> None:
    def tag(names: Sequence[str]) -> None: ...

    with pytest.raises(txqueue.InvalidTypeError, match="names"):
        Signature(tag, "tag", context=False).dump(("abc",), {})
