"""How the values of one annotation become JSON and come back.

A codec checks what a caller gives before anything is written (``dump``) and rebuilds the
value from what was stored (``load``); both name the path at fault. ``codec_for`` makes
one from an annotation, once; ``jsonable`` turns what a handler returns into JSON types.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, MutableMapping, MutableSequence, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal, Union, cast

from .errors import ConfigError, InvalidTypeError, InvalidValueError


class Codec:
    """How the values of one annotation become JSON and come back. ``dump`` checks what
    a caller gives (InvalidTypeError, InvalidValueError); ``load`` checks what was stored."""

    def dump(self, value: Any, where: str) -> Any:
        return value

    def load(self, value: Any, where: str) -> Any:
        return value


class _Scalar(Codec):
    def __init__(self, kind: type) -> None:
        self.kind = kind

    def _check(self, value: Any, where: str) -> Any:
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if (isinstance(value, bool) and self.kind is not bool) or not isinstance(value, self.kind):
            raise InvalidTypeError(where, f"must be {_named(self.kind)}, not {_kind(value)}")
        return value

    dump = load = _check


class _Enum(Codec):
    def __init__(self, kind: type[enum.Enum]) -> None:
        self.kind = kind

    def dump(self, value: Any, where: str) -> Any:
        if not isinstance(value, self.kind):
            raise InvalidTypeError(where, f"must be {_named(self.kind)}, not {_kind(value)}")
        return value.value

    def load(self, value: Any, where: str) -> Any:
        try:
            return self.kind(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in self.kind)
            raise InvalidValueError(where, f"must be one of {choices}, got {value!r:.60}") from None


class _Text(Codec):
    """A value stored as text (or as seconds, for a timedelta)."""

    def __init__(self, kind: type, parse: Callable[[Any], Any], stored: type | tuple[type, ...]):
        self.kind, self.parse, self.stored = kind, parse, stored

    def dump(self, value: Any, where: str) -> Any:
        # A datetime is a date: a date argument given one would come back a datetime.
        if not isinstance(value, self.kind) or (self.kind is date and isinstance(value, datetime)):
            raise InvalidTypeError(where, f"must be {_named(self.kind)}, not {_kind(value)}")
        if isinstance(value, timedelta):
            return value.total_seconds()
        return value.isoformat() if hasattr(value, "isoformat") else str(value)

    def load(self, value: Any, where: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, self.stored):
            raise InvalidTypeError(where, f"must be {_named(self.kind)}, stored as {_kind(value)}")
        try:
            return self.parse(value)
        except (ValueError, InvalidOperation, OverflowError):
            raise InvalidValueError(where, f"is not {_named(self.kind)}: {value!r:.60}") from None


class Items(Codec):
    """list[T], Sequence[T], tuple[T, ...], set[T], frozenset[T]: a JSON array."""

    def __init__(self, item: Codec, made: Callable[[list[Any]], Any], accepts: tuple[type, ...]):
        self.item, self.made, self.accepts = item, made, accepts

    def dump(self, value: Any, where: str) -> Any:
        if isinstance(value, str | bytes) or not isinstance(value, self.accepts):
            kind = self.accepts[0].__name__
            raise InvalidTypeError(where, f"must be a {kind}, not {_kind(value)}")
        items: list[Any] = list(cast(Iterable[Any], value))
        return [self.item.dump(v, f"{where}[{i}]") for i, v in enumerate(items)]

    def load(self, value: Any, where: str) -> Any:
        if not isinstance(value, list):
            raise InvalidTypeError(where, f"must be an array, stored as {_kind(value)}")
        return self.made([self.item.load(v, f"{where}[{i}]") for i, v in enumerate(value)])


class _Tuple(Codec):
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


class _Dict(Codec):
    def __init__(self, value: Codec) -> None:
        self.value = value

    def _each(self, value: Any, where: str, convert: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise InvalidTypeError(where, f"must be a dict, not {_kind(value)}")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidTypeError(where, f"has a key of type {_kind(key)}; keys must be str")
            out[key] = getattr(self.value, convert)(item, f"{where}[{key!r}]")
        return out

    def dump(self, value: Any, where: str) -> Any:
        return self._each(value, where, "dump")

    def load(self, value: Any, where: str) -> Any:
        return self._each(value, where, "load")


class _Union(Codec):
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
        raise InvalidTypeError(where, f"must be {self.text}, not {_kind(value)}")

    def dump(self, value: Any, where: str) -> Any:
        return self._first(value, where, "dump")

    def load(self, value: Any, where: str) -> Any:
        return self._first(value, where, "load")


class _Literal(Codec):
    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def _check(self, value: Any, where: str) -> Any:
        # 1 == True: compare the types too.
        if not any(type(value) is type(v) and value == v for v in self.values):
            choices = ", ".join(repr(v) for v in self.values)
            raise InvalidValueError(where, f"must be one of {choices}, got {value!r:.60}")
        return value

    dump = load = _check


class _Fields(Codec):
    """A dataclass or a TypedDict: a JSON object of its fields. Its fields' codecs are
    made on first use, so a type may contain itself."""

    def __init__(self, kind: type, owner: str, given: Mapping[Any, Any] | None = None) -> None:
        self.kind, self.owner = kind, owner
        self.given = given or {}  # a generic one's type arguments, by its type variables
        self.is_dataclass = dataclasses.is_dataclass(kind)
        self._fields: dict[str, Codec] | None = None
        if self.is_dataclass:
            self.required = {
                f.name
                for f in dataclasses.fields(kind)
                if f.init
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            }
        else:
            self.required = set(getattr(kind, "__required_keys__", ()))

    def fields(self) -> dict[str, Codec]:
        if self._fields is None:
            hints = type_hints(self.kind, self.owner)
            if self.is_dataclass:
                names = [f.name for f in dataclasses.fields(self.kind) if f.init]
            else:
                names = list(hints)
            self._fields = {
                n: codec_for(_given(hints.get(n, Any), self.given), self.owner) for n in names
            }
        return self._fields

    def dump(self, value: Any, where: str) -> Any:
        fields = self.fields()
        if self.is_dataclass:
            if not isinstance(value, self.kind):
                raise InvalidTypeError(where, f"must be {_named(self.kind)}, not {_kind(value)}")
            return {n: c.dump(getattr(value, n), f"{where}.{n}") for n, c in fields.items()}
        return self._object(value, where, "dump")

    def load(self, value: Any, where: str) -> Any:
        values = self._object(value, where, "load")
        if not self.is_dataclass:
            return values
        try:
            return self.kind(**values)
        except (TypeError, ValueError) as exc:  # its __post_init__'s checks
            raise InvalidValueError(where, str(exc)) from None

    def _object(self, value: Any, where: str, convert: str) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise InvalidTypeError(where, f"must be {_named(self.kind)}, not {_kind(value)}")
        fields = self.fields()
        for key in value:
            if key not in fields:
                raise InvalidValueError(f"{where}.{key}", f"is not a field of {_named(self.kind)}")
        for key in sorted(self.required - set(value)):
            raise InvalidValueError(f"{where}.{key}", "is missing")
        return {k: getattr(fields[k], convert)(v, f"{where}.{k}") for k, v in value.items()}


class _Model(Codec):
    """A pydantic model (the ``pydantic`` extra), known by its methods: nothing here
    imports pydantic."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind

    def dump(self, value: Any, where: str) -> Any:
        if not isinstance(value, self.kind):
            raise InvalidTypeError(where, f"must be {_named(self.kind)}, not {_kind(value)}")
        return value.model_dump(mode="json")

    def load(self, value: Any, where: str) -> Any:
        try:
            return self.kind.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            first = str(exc).splitlines()
            raise InvalidValueError(where, " ".join(first[1:3]).strip() or str(exc)) from None


PLAIN: Final = Codec()
_TEXTS: Final[dict[type, tuple[Callable[[Any], Any], type | tuple[type, ...]]]] = {
    datetime: (datetime.fromisoformat, str),
    date: (date.fromisoformat, str),
    time: (time.fromisoformat, str),
    Decimal: (Decimal, (str, int)),
    uuid.UUID: (uuid.UUID, str),
    timedelta: (lambda s: timedelta(seconds=s), (int, float)),
}
_ARRAYS: Final[dict[Any, tuple[Callable[[list[Any]], Any], tuple[type, ...]]]] = {
    list: (list, (list, tuple)),
    MutableSequence: (list, (list,)),
    Sequence: (list, (list, tuple)),
    set: (set, (set, frozenset)),
    frozenset: (frozenset, (frozenset, set)),
    AbstractSet: (frozenset, (set, frozenset)),
}
_cache: dict[Any, Codec] = {}


def _given(tp: Any, given: Mapping[Any, Any]) -> Any:
    """``tp`` with the type variables of ``given`` replaced by their arguments."""
    if not given:
        return tp
    if isinstance(tp, typing.TypeVar):
        return given.get(tp, Any)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if not args:
        return tp
    new = tuple(_given(a, given) for a in args)
    if origin in (Union, types.UnionType):
        return Union[new]  # noqa: UP007 (a tuple of types, built at run time)
    return origin[new] if origin is not None else tp


def codec_for(annotation: Any, owner: str) -> Codec:
    """The codec of ``annotation`` (resolved, not a string); ConfigError naming ``owner``
    (the task) for a type JSON cannot carry back."""
    try:
        return _cache[annotation]
    except (KeyError, TypeError):  # TypeError: an unhashable annotation
        pass
    codec = _make(annotation, owner)
    with contextlib.suppress(TypeError):
        _cache[annotation] = codec
    return codec


def _make(tp: Any, owner: str) -> Codec:
    if tp in (Any, object, inspect.Parameter.empty):
        return PLAIN
    if tp is None or tp is type(None):
        return _Literal((None,))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return codec_for(args[0], owner)
    if origin in (Union, types.UnionType):
        text = " or ".join("None" if a is type(None) else _named(a) for a in args)
        return _Union([codec_for(a, owner) for a in args], text)
    if origin is Literal:
        return _Literal(args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return Items(codec_for(args[0], owner), tuple, (tuple, list))
        return _Tuple([codec_for(a, owner) for a in args])
    if origin in (dict, Mapping, MutableMapping) or tp in (dict, Mapping, MutableMapping):
        if args and args[0] is not str:
            raise ConfigError(f"task {owner!r}: {_named(tp)}: JSON object keys are str")
        return _Dict(codec_for(args[1], owner) if args else PLAIN)
    array = _ARRAYS.get(origin or tp)
    if array is not None:
        return Items(codec_for(args[0], owner) if args else PLAIN, *array)
    if isinstance(tp, typing.NewType):
        return codec_for(tp.__supertype__, owner)
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        # A generic dataclass given its type arguments (``txqueue.Outcome[int]``).
        params = getattr(origin, "__parameters__", ())
        return _Fields(origin, owner, dict(zip(params, args, strict=False)))
    if tp in (bool, int, float, str):
        return _Scalar(tp)
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return _Enum(tp)
        if tp in _TEXTS:
            return _Text(tp, *_TEXTS[tp])
        if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
            # Cached before its fields are made, so that a field of its own type finds it.
            codec = _cache[tp] = _Fields(tp, owner)
            try:
                codec.fields()
            except ConfigError:
                del _cache[tp]
                raise
            return codec
        if callable(getattr(tp, "model_validate", None)) and hasattr(tp, "model_dump"):
            return _Model(tp)
    raise ConfigError(
        f"task {owner!r}: txqueue cannot store {_named(tp)} as JSON; use str, int, float, "
        "bool, None, a list, tuple, set or dict of them, an enum, datetime, date, time, "
        "timedelta, Decimal, UUID, a dataclass, a TypedDict, or a pydantic model"
    )


def type_hints(obj: Any, owner: str) -> dict[str, Any]:
    if not (inspect.isroutine(obj) or isinstance(obj, type)):
        obj = getattr(obj, "__call__", None)  # noqa: B004 - a callable object's hints
        if not inspect.isroutine(obj):
            return {}  # a partial, a builtin: its types are not known
    try:
        return typing.get_type_hints(obj)
    except Exception as exc:  # NameError, mostly: a type defined where the module cannot see it
        raise ConfigError(
            f"task {owner!r}: cannot resolve the annotations of {_named(obj)} ({exc}); "
            "define the types they name at module level"
        ) from None


def _named(tp: Any) -> str:
    name = getattr(tp, "__name__", None)
    if name is None or typing.get_args(tp):
        return str(tp).replace("typing.", "")
    return "None" if tp is type(None) else str(name)


def _kind(value: Any) -> str:
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
