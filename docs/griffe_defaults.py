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
