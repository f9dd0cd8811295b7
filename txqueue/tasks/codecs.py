"""How the values of one annotation become JSON and come back: a codec class per kind of
type (scalars, enums, values stored as text, arrays, tuples, dicts, unions, literals,
pydantic models).

A codec checks what a caller gives before anything is written (``dump``) and rebuilds the
value from what was stored (``load``); both name the path at fault. ``hints.codec_for``
picks one for an annotation; ``jsonable`` turns what a handler returns into JSON types.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final, cast

from ..errors import InvalidTypeError, InvalidValueError


class Codec:
    """How the values of one annotation become JSON and come back. ``dump`` checks what
    a caller gives (InvalidTypeError, InvalidValueError); ``load`` checks what was stored."""

    def dump(self, value: Any, where: str) -> Any:
        return value

    def load(self, value: Any, where: str) -> Any:
        return value


class ScalarCodec(Codec):
    def __init__(self, kind: type) -> None:
        self.kind = kind

    def _check(self, value: Any, where: str) -> Any:
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if (isinstance(value, bool) and self.kind is not bool) or not isinstance(value, self.kind):
            raise InvalidTypeError(where, f"must be {named(self.kind)}, not {kind_of(value)}")
        return value

    dump = load = _check


class EnumCodec(Codec):
    def __init__(self, kind: type[enum.Enum]) -> None:
        self.kind = kind

    def dump(self, value: Any, where: str) -> Any:
        if not isinstance(value, self.kind):
            raise InvalidTypeError(where, f"must be {named(self.kind)}, not {kind_of(value)}")
        return value.value

    def load(self, value: Any, where: str) -> Any:
        try:
            return self.kind(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in self.kind)
            raise InvalidValueError(where, f"must be one of {choices}, got {value!r:.60}") from None


class TextCodec(Codec):
    """A value stored as text (or as seconds, for a timedelta)."""

    def __init__(self, kind: type, parse: Callable[[Any], Any], stored: type | tuple[type, ...]):
        self.kind, self.parse, self.stored = kind, parse, stored

    def dump(self, value: Any, where: str) -> Any:
        # A datetime is a date: a date argument given one would come back a datetime.
        if not isinstance(value, self.kind) or (self.kind is date and isinstance(value, datetime)):
            raise InvalidTypeError(where, f"must be {named(self.kind)}, not {kind_of(value)}")
        if isinstance(value, timedelta):
            return value.total_seconds()
        return value.isoformat() if hasattr(value, "isoformat") else str(value)

    def load(self, value: Any, where: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, self.stored):
            raise InvalidTypeError(where, f"must be {named(self.kind)}, stored as {kind_of(value)}")
        try:
            return self.parse(value)
        except (ValueError, InvalidOperation, OverflowError):
            raise InvalidValueError(where, f"is not {named(self.kind)}: {value!r:.60}") from None


class Items(Codec):
    """list[T], Sequence[T], tuple[T, ...], set[T], frozenset[T]: a JSON array."""

    def __init__(self, item: Codec, made: Callable[[list[Any]], Any], accepts: tuple[type, ...]):
        self.item, self.made, self.accepts = item, made, accepts

    def dump(self, value: Any, where: str) -> Any:
        if isinstance(value, str | bytes) or not isinstance(value, self.accepts):
            kind = self.accepts[0].__name__
            raise InvalidTypeError(where, f"must be a {kind}, not {kind_of(value)}")
        items: list[Any] = list(cast(Iterable[Any], value))
        return [self.item.dump(v, f"{where}[{i}]") for i, v in enumerate(items)]

    def load(self, value: Any, where: str) -> Any:
        if not isinstance(value, list):
            raise InvalidTypeError(where, f"must be an array, stored as {kind_of(value)}")
        return self.made([self.item.load(v, f"{where}[{i}]") for i, v in enumerate(value)])


class TupleCodec(Codec):
    def __init__(self, items: list[Codec]) -> None:
        self.items = items

    def _pairs(self, value: Any, where: str, kinds: tuple[type, ...]) -> list[tuple[Codec, Any]]:
        items: list[Any] = list(cast(Iterable[Any], value)) if isinstance(value, kinds) else [None]
        if len(items) != len(self.items) or not isinstance(value, kinds):
            raise InvalidTypeError(where, f"must be a tuple of {len(self.items)} items")
        return list(zip(self.items, items, strict=True))

    def dump(self, value: Any, where: str) -> Any:
        pairs = self._pairs(value, where, (tuple,))
        return [c.dump(v, f"{where}[{i}]") for i, (c, v) in enumerate(pairs)]

    def load(self, value: Any, where: str) -> Any:
        pairs = self._pairs(value, where, (list,))
        return tuple(c.load(v, f"{where}[{i}]") for i, (c, v) in enumerate(pairs))


class DictCodec(Codec):
    def __init__(self, value: Codec) -> None:
        self.value = value

    def _each(self, value: Any, where: str, convert: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise InvalidTypeError(where, f"must be a dict, not {kind_of(value)}")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidTypeError(where, f"has a key of type {kind_of(key)}; keys must be str")
            out[key] = getattr(self.value, convert)(item, f"{where}[{key!r}]")
        return out

    def dump(self, value: Any, where: str) -> Any:
        return self._each(value, where, "dump")

    def load(self, value: Any, where: str) -> Any:
        return self._each(value, where, "load")


class UnionCodec(Codec):
    def __init__(self, options: list[Codec], text: str) -> None:
        self.options, self.text = options, text

    def _first(self, value: Any, where: str, convert: str) -> Any:
        deepest: InvalidTypeError | InvalidValueError | None = None
        for option in self.options:
            try:
                return getattr(option, convert)(value, where)
            except (InvalidTypeError, InvalidValueError) as exc:
                if exc.field != where and (deepest is None or len(exc.field) > len(deepest.field)):
                    deepest = exc  # an option the value's shape fits, wrong inside
        if deepest is not None:
            raise deepest
        raise InvalidTypeError(where, f"must be {self.text}, not {kind_of(value)}")

    def dump(self, value: Any, where: str) -> Any:
        return self._first(value, where, "dump")

    def load(self, value: Any, where: str) -> Any:
        return self._first(value, where, "load")


class LiteralCodec(Codec):
    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def _check(self, value: Any, where: str) -> Any:
        # 1 == True: compare the types too.
        if not any(type(value) is type(v) and value == v for v in self.values):
            choices = ", ".join(repr(v) for v in self.values)
            raise InvalidValueError(where, f"must be one of {choices}, got {value!r:.60}")
        return value

    dump = load = _check


class ModelCodec(Codec):
    """A pydantic model (the ``pydantic`` extra), known by its methods: nothing here
    imports pydantic."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind

    def dump(self, value: Any, where: str) -> Any:
        if not isinstance(value, self.kind):
            raise InvalidTypeError(where, f"must be {named(self.kind)}, not {kind_of(value)}")
        return value.model_dump(mode="json")

    def load(self, value: Any, where: str) -> Any:
        try:
            return self.kind.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            first = str(exc).splitlines()
            raise InvalidValueError(where, " ".join(first[1:3]).strip() or str(exc)) from None


PLAIN: Final = Codec()


def named(tp: Any) -> str:
    """A type as an error message names it."""
    name = getattr(tp, "__name__", None)
    if name is None or typing.get_args(tp):
        return str(tp).replace("typing.", "")
    return "None" if tp is type(None) else str(name)


def kind_of(value: Any) -> str:
    """A value's type, as an error message names it."""
    return type(value).__name__


def jsonable(value: Any) -> Any:
    """``value`` with what the codecs store turned to JSON types: what a handler returns
    is stored this way, its dataclasses, enums, datetimes, … included."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return value
