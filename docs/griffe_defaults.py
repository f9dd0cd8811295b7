"""A griffe extension for the API reference: a parameter whose default is one of
txqueue's constants (``queue=DEFAULT_QUEUE``) shows the constant's value (``'default'``),
which is what a reader wants to know."""

from __future__ import annotations

from typing import Any

import griffe


class ConstantDefaults(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for function in _functions(pkg):
            for parameter in function.parameters:
                default = parameter.default
                if not isinstance(default, griffe.ExprName):
                    continue
                try:
                    target = pkg.modules_collection[default.canonical_path]
                except (KeyError, griffe.AliasResolutionError):
                    continue
                if isinstance(target, griffe.Attribute) and isinstance(target.value, str):
                    parameter.default = target.value


def _functions(obj: griffe.Object) -> list[griffe.Function]:
    found: list[griffe.Function] = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Function):
            found += [member, *(member.overloads or [])]
        elif isinstance(member, griffe.Class | griffe.Module):
            found += _functions(member)
    return found


class DefaultMethods(griffe.Extension):
    """The module-level calls that are the methods of the process's defaults
    (``get_task = DEFAULTS.get_task``, as the standard library's ``random.random`` is a
    method of ``random``'s generator): shown as the functions they are, with the method's
    signature (without ``self``) and docstring, where griffe, reading the source, sees only
    attributes."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for name, member in list(pkg.members.items()):
            if member.is_alias or not isinstance(member, griffe.Attribute):
                continue
            value = member.value
            if not isinstance(value, griffe.ExprAttribute) or str(value) != f"DEFAULTS.{name}":
                continue
            instance = pkg.members["DEFAULTS"].final_target
            assert isinstance(instance, griffe.Attribute)
            assert isinstance(instance.value, griffe.ExprCall)
            made = pkg.modules_collection[instance.value.function.canonical_path]
            method = made.all_members[name]
            target = method.final_target if method.is_alias else method
            pkg.set_member(name, _as_function(target, member))


def _as_function(method: Any, where: griffe.Attribute) -> griffe.Function:
    function = griffe.Function(
        where.name,
        lineno=where.lineno,
        endlineno=where.endlineno,
        parameters=griffe.Parameters(*list(method.parameters)[1:]),
        returns=method.returns,
        docstring=method.docstring,
    )
    function.labels = set(method.labels)
    return function
