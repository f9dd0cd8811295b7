"""A handler's signature as its task's schema.

An enqueue checks the arguments against the handler's annotations and stores them as a
JSON object of keyword arguments; the worker rebuilds the same values from the same
annotations and calls the handler with them. Both ends name the argument at fault.

A handler of one argument that is named ``payload``, untyped or a dict receives the
stored JSON whole: the original form of a handler, as ``Task(name, payload)`` fills it.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Final, TypeVar

from ..core.fields import encode_json
from ..errors import ConfigError, InvalidTypeError, InvalidValueError, TaskArgumentsError
from .codecs import Codec, Items
from .hints import codec_for, type_hints

PAYLOAD: Final = "payload"
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class _Param:
    name: str
    kind: inspect._ParameterKind
    codec: Codec
    required: bool


class Signature:
    """What a handler takes: ``dump`` makes the JSON an enqueue stores from the arguments
    a caller gives, ``load`` the arguments the worker passes back from that JSON."""

    def __init__(self, fn: Callable[..., Any], owner: str, *, context: bool) -> None:
        self.owner = owner
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # a builtin with no signature: takes the payload
            params = [inspect.Parameter(PAYLOAD, inspect.Parameter.POSITIONAL_ONLY)]
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        hints = type_hints(fn, owner) if any(_annotated(p) for p in params) else {}
        self.context: int | None = None
        if context:
            if not positional or params[0] is not positional[0]:
                raise ConfigError(
                    f"task {owner!r}: context=True passes the TaskContext as the first "
                    "argument; the handler takes none"
                )
            self.context = 0
        elif positional and _is_context(positional[0].annotation):
            raise ConfigError(
                f"task {owner!r}: its first argument is a TaskContext: register it with "
                "context=True"
            )
        elif len(params) == len(positional) == 2 and (
            _is_context(positional[1].annotation)
            or (not _annotated(positional[1]) and _whole(positional[0], hints))
        ):
            self.context = 1  # the original form: (payload, ctx)
        if self.context is not None:
            del params[self.context]
        # Else the codec's complaint about the context's own fields is all a user sees.
        stray = next((p.name for p in params if _is_context(p.annotation)), None)
        if stray is not None:
            raise ConfigError(
                f"task {owner!r}: {stray!r}: the TaskContext must be the handler's first "
                "positional parameter, with context=True"
            )
        # The original form of a handler: one argument, the stored JSON whole.
        self.whole: str | None = None
        only = params[0] if len(params) == 1 else None
        if only is not None and _whole(only, hints):
            self.whole = only.name
        self.params = {
            p.name: _Param(
                p.name,
                p.kind,
                codec_for(hints.get(p.name, Any), owner),
                # A whole payload may be left out, as Task's may: it is then {}.
                p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and self.whole is None,
            )
            for p in params
        }
        self.positional = [
            p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self.var_positional = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
        self.var_keyword = next((p.name for p in params if p.kind == p.VAR_KEYWORD), None)
        self._fn = fn
        self._result: Codec | None = None

    def dump(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The JSON-ready payload of a call with ``args`` and ``kwargs``; raises
        InvalidTypeError or InvalidValueError naming the argument. Arguments not given
        are not stored: the handler's defaults apply when it runs."""
        return self._dumped(self._bind(args, kwargs))

    def _dumped(self, given: Mapping[str, Any]) -> Any:
        if self.whole is not None:
            if self.whole not in given:
                return None
            return self.params[self.whole].codec.dump(given[self.whole], self.whole)
        return self._dump(given)

    def _dump(self, given: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in given.items():
            param = self.params.get(name)
            if param is None:  # a **kwargs entry
                out[name] = self.params[self.var_keyword or ""].codec.dump(value, name)
            elif param.kind == inspect.Parameter.VAR_POSITIONAL:
                out[name] = [param.codec.dump(v, f"{name}[{i}]") for i, v in enumerate(value)]
            else:
                out[name] = param.codec.dump(value, name)
        return out

    def split(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], ref: type[T]
    ) -> tuple[Any, dict[str, T]]:
        """``dump``, but the arguments given a ``ref`` (a workflow's parent's result, known
        when the step runs) are left out of the payload and returned apart, by name."""
        given = self._bind(args, kwargs)
        refs = {name: value for name, value in given.items() if isinstance(value, ref)}
        for name, value in given.items():
            if isinstance(value, list | tuple | set) and any(isinstance(v, ref) for v in value):
                raise InvalidValueError(
                    name, "holds a parent's result: pass Workflow.results([...]) for a list"
                )
        if not refs:
            return self._dumped(given), {}
        if self.whole is not None:
            raise InvalidValueError(
                self.whole, "is the whole payload: a parent's result goes to a named argument"
            )
        for name in refs:
            param = self.params.get(name)
            if param is None or param.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.VAR_POSITIONAL,
            ):
                raise InvalidValueError(name, "a parent's result goes to a named argument")
            if param.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD and self.var_positional:
                raise InvalidValueError(name, "a parent's result goes to a named argument")
        rest = {name: value for name, value in given.items() if name not in refs}
        payload = self._dump(rest)
        return payload, refs

    def culprit(self, payload: Any) -> None:
        """Raise InvalidValueError naming the argument that JSON cannot hold, if one
        does (called when the whole payload failed to encode)."""
        items = {self.whole: payload} if self.whole is not None else payload
        for name, value in items.items():
            encode_json(value, name)

    def _bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        given: dict[str, Any] = dict(zip(self.positional, args, strict=False))
        extra = args[len(self.positional) :]
        if extra:
            if self.var_positional is None:
                raise InvalidValueError(
                    "arguments",
                    f"task {self.owner!r} takes {len(self.positional)} positional arguments, "
                    f"{len(args)} were given",
                )
            given[self.var_positional] = extra
        for name, value in kwargs.items():
            param = self.params.get(name)
            if param is None or param.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                if self.var_keyword is None or name in self.params:
                    raise InvalidValueError(name, f"is not an argument of task {self.owner!r}")
            elif name in given:
                raise InvalidValueError(name, "is given twice")
            given[name] = value
        for param in self.params.values():
            if param.required and param.name not in given:
                raise InvalidValueError(param.name, f"is missing: task {self.owner!r} needs it")
        return given

    def load(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments of the handler, from a stored payload;
        raises TaskArgumentsError naming the argument that does not fit."""
        try:
            return self._load(payload)
        except (InvalidTypeError, InvalidValueError) as exc:
            raise TaskArgumentsError(exc.field, str(exc).split(": ", 1)[-1]) from None

    def _load(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        if self.whole is not None:
            return [self.params[self.whole].codec.load(payload, self.whole)], {}
        if not isinstance(payload, dict):
            raise InvalidTypeError(
                PAYLOAD, f"must be a JSON object of task {self.owner!r}'s arguments"
            )
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        # With *args, the arguments before it can only go by position.
        by_position: set[inspect._ParameterKind] = {inspect.Parameter.POSITIONAL_ONLY}
        if self.var_positional is not None:
            by_position.add(inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for name, param in self.params.items():
            if name not in payload:
                if param.required:
                    raise InvalidValueError(name, "is missing")
                if param.kind in by_position:
                    by_position.clear()  # the rest by name, after a default taken
                continue
            if param.kind == inspect.Parameter.VAR_POSITIONAL:
                args.extend(Items(param.codec, list, (list,)).load(payload[name], name))
            elif param.kind == inspect.Parameter.VAR_KEYWORD:
                raise InvalidValueError(name, "is not an argument")
            elif param.kind in by_position:
                args.append(param.codec.load(payload[name], name))
            else:
                kwargs[name] = param.codec.load(payload[name], name)
        for name in payload.keys() - self.params.keys():
            if self.var_keyword is None:
                raise InvalidValueError(name, "is not an argument")
            kwargs[name] = self.params[self.var_keyword].codec.load(payload[name], name)
        return args, kwargs

    def result(self, value: Any) -> Any:
        """A stored result as the handler's return annotation says."""
        if self._result is None:
            hint = type_hints(self._fn, self.owner).get("return", Any)
            self._result = codec_for(hint, self.owner)
        return self._result.load(value, "result")


def _whole(param: inspect.Parameter, hints: dict[str, Any]) -> bool:
    """Whether ``param`` is the original form's: the stored JSON, whole."""
    return param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and (
        param.name == PAYLOAD or _untyped_or_dict(hints.get(param.name, Any))
    )


def _annotated(param: inspect.Parameter) -> bool:
    return param.annotation is not param.empty


def _untyped_or_dict(tp: Any) -> bool:
    return tp in (Any, object) or (typing.get_origin(tp) or tp) in (dict, Mapping, MutableMapping)


def _is_context(annotation: Any) -> bool:
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return isinstance(name, str) and name.rsplit(".", 1)[-1] == "TaskContext"
