"""From a type hint to its codec: ``codec_for`` reads an annotation once (generics,
unions, containers, dataclasses, TypedDicts, …) and builds the codec that checks and
rebuilds its values; ``type_hints`` resolves a handler's annotations. Dataclasses and
TypedDicts get ``FieldsCodec``, which reads its fields' hints on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import types
import typing
import uuid
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from collections.abc import Set as AbstractSet
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Final, Literal, Union

from ..errors import ConfigError, InvalidTypeError, InvalidValueError
from .codecs import (
    PLAIN,
    Codec,
    DictCodec,
    EnumCodec,
    Items,
    LiteralCodec,
    ModelCodec,
    ScalarCodec,
    TextCodec,
    TupleCodec,
    UnionCodec,
    kind_of,
    named,
)


class FieldsCodec(Codec):
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
                raise InvalidTypeError(where, f"must be {named(self.kind)}, not {kind_of(value)}")
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
            raise InvalidTypeError(where, f"must be {named(self.kind)}, not {kind_of(value)}")
        fields = self.fields()
        for key in value:
            if key not in fields:
                raise InvalidValueError(f"{where}.{key}", f"is not a field of {named(self.kind)}")
        for key in sorted(self.required - set(value)):
            raise InvalidValueError(f"{where}.{key}", "is missing")
        return {k: getattr(fields[k], convert)(v, f"{where}.{k}") for k, v in value.items()}


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
        return LiteralCodec((None,))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return codec_for(args[0], owner)
    if origin in (Union, types.UnionType):
        text = " or ".join("None" if a is type(None) else named(a) for a in args)
        return UnionCodec([codec_for(a, owner) for a in args], text)
    if origin is Literal:
        return LiteralCodec(args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return Items(codec_for(args[0], owner), tuple, (tuple, list))
        return TupleCodec([codec_for(a, owner) for a in args])
    if origin in (dict, Mapping, MutableMapping) or tp in (dict, Mapping, MutableMapping):
        if args and args[0] is not str:
            raise ConfigError(f"task {owner!r}: {named(tp)}: JSON object keys are str")
        return DictCodec(codec_for(args[1], owner) if args else PLAIN)
    array = _ARRAYS.get(origin or tp)
    if array is not None:
        return Items(codec_for(args[0], owner) if args else PLAIN, *array)
    if isinstance(tp, typing.NewType):
        return codec_for(tp.__supertype__, owner)
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        # A generic dataclass given its type arguments (``txqueue.Outcome[int]``).
        params = getattr(origin, "__parameters__", ())
        return FieldsCodec(origin, owner, dict(zip(params, args, strict=False)))
    if tp in (bool, int, float, str):
        return ScalarCodec(tp)
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return EnumCodec(tp)
        if tp in _TEXTS:
            return TextCodec(tp, *_TEXTS[tp])
        if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
            # Cached before its fields are made, so that a field of its own type finds it.
            codec = _cache[tp] = FieldsCodec(tp, owner)
            try:
                codec.fields()
            except ConfigError:
                del _cache[tp]
                raise
            return codec
        if callable(getattr(tp, "model_validate", None)) and hasattr(tp, "model_dump"):
            return ModelCodec(tp)
    raise ConfigError(
        f"task {owner!r}: txqueue cannot store {named(tp)} as JSON; use str, int, float, "
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
            f"task {owner!r}: cannot resolve the annotations of {named(obj)} ({exc}); "
            "define the types they name at module level"
        ) from None
