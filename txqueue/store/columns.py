"""The task row as an enqueue writes it, declared once.

Each value an insert sends is a ``Field``: the column it fills, where its value comes from
(an attribute of the ``Task``, of a workflow's ``Planned`` step, or the call), its
PostgreSQL type (the cast of its array for ``unnest``), and how SQLite keeps it. Every
insert of both stores is made of this declaration: the column lists and values of the
statements in their ``queries.sql`` (``{task_columns}`` and its kin, filled in once when the
file is read: ``fragments``), and the parameters their Python sends (``maker``). A new
column touches schema.sql, its migration and ``TASK`` or ``STEP`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Dialect = Literal["postgresql", "sqlite"]


@dataclass(frozen=True, slots=True)
class Field:
    """One value an insert sends, under its column's name."""

    name: str
    source: str | None
    """The attribute it is read from (of the Task; of the Planned step, in ``STEP``), or
    None: the call gives it."""
    pg_type: str
    cast: bool = False
    """Cast where it stands alone in a VALUES list: PostgreSQL takes a parameter there as
    text (jsonb), or cannot tell its type (a coalesce of two parameters)."""
    instant: bool = False
    """A datetime: SQLite keeps Unix seconds."""
    text: bool = False
    """A UUID read off the object: SQLite keeps its text."""
    copy: bool = True
    """COPY writes it. COPY takes plain tasks only: no unique key to take, no time to work
    out, so no run_at (the column's default) and no unique_key."""
    step: bool = True
    """A workflow's step has it."""
    once: bool = False
    """One value for every row of a call (its trace, its workflow): a many-row insert sends
    it once."""
    stored: bool = True
    """A column of its own; ``delay`` is not: it only works out ``run_at``."""
    pg: str = ""
    sqlite: str = ""
    """What the column is set to, when not the value sent: the other fields as ``{name}``,
    SQLite's clock as ``{now}``."""


TASK: tuple[Field, ...] = (
    Field("id", None, "uuid"),
    Field("trace_context", None, "jsonb", cast=True, once=True),
    Field("queue", "queue", "text"),
    Field("name", "name", "text"),
    Field("payload", "payload_json", "jsonb", cast=True),
    Field("priority", "priority", "smallint"),
    Field(
        "run_at",
        "run_at",
        "timestamptz",
        instant=True,
        copy=False,
        pg="coalesce({run_at}, now() + make_interval(secs => coalesce({delay}, 0)))",
        sqlite="coalesce({run_at}, {now} + coalesce({delay}, 0))",
    ),
    Field("delay", "delay_seconds", "float8", cast=True, copy=False, stored=False),
    Field("max_attempts", "max_attempts", "int"),
    Field("timeout", "timeout", "float8"),
    Field("unique_key", "unique_key", "text", copy=False, step=False),
    Field("concurrency_key", "concurrency_key", "text"),
    Field("start_by", "start_by", "timestamptz", instant=True),
    Field("expires_in", "expires_seconds", "float8"),
    Field("time_limit", "time_limit", "float8"),
    Field("parent_id", "parent_id", "uuid", text=True),
)
"""A task's fields, in the order every insert lists them: first those the call gives (the
new id, the trace), then those read off the Task."""

STEP: tuple[Field, ...] = (
    Field("workflow_id", None, "uuid", once=True),
    Field("step", "step", "text"),
    Field("parents", "parents_json", "jsonb"),
    Field("inputs", "inputs_json", "jsonb"),
    Field("state", "state", "text"),
)
"""What a workflow's step adds to its task's fields: first its workflow (the call's), then
what is read off the Planned step."""

STEP_TASK: tuple[Field, ...] = tuple(f for f in TASK if f.step)
"""The task's fields of a workflow's step."""


def maker(
    *parts: tuple[str, Sequence[Field]],
    into: Literal["dict", "tuple"],
    seconds: bool = False,
    extra: Sequence[str] = (),
) -> Callable[..., Any]:
    """A function that makes an insert's parameters for one row: ``f(obj, *given, *extra)``
    returns the values of each part's fields, read off ``obj`` (``"obj"``) or an attribute of
    it (``"obj.task"``), or given by the call (its fields of no source, then ``extra``, by
    their names), as a dict or a tuple in the fields' order. ``seconds``: instants as Unix
    seconds and UUIDs as text (SQLite's).

    It is compiled from its source once, at import, as ``dataclasses`` writes ``__init__``:
    an enqueue runs one display of its values, as code written by hand would, not a loop
    over the declaration.
    """
    given = [f.name for _, fields in parts for f in fields if f.source is None]
    values: list[tuple[str, str]] = []
    for base, fields in parts:
        for f in fields:
            read = f.name if f.source is None else f"{base}.{f.source}"
            if seconds and f.instant:
                read = f"(None if {read} is None else {read}.timestamp())"
            elif seconds and f.text:
                read = f"(None if {read} is None else str({read}))"
            values.append((f.name, read))
    values += [(name, name) for name in extra]
    if into == "dict":
        body = "{" + ", ".join(f"{name!r}: {read}" for name, read in values) + "}"
    else:
        body = "(" + ", ".join(read for _, read in values) + ",)"
    names = ["obj", *given, *extra]
    sources = [f.source for _, fields in parts for f in fields if f.source is not None]
    if not all(n.isidentifier() for n in [*names, *sources]):
        raise ValueError(f"not a name: {names + sources}")
    source = f"def make({', '.join(names)}):\n    return {body}\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<txqueue.store.columns {body[:40]}>", "exec"), namespace)
    made: Callable[..., Any] = namespace["make"]
    return made


def copied(fields: Sequence[Field]) -> tuple[Field, ...]:
    """``fields`` that COPY writes."""
    return tuple(f for f in fields if f.copy)


def per_row(fields: Sequence[Field]) -> tuple[str, ...]:
    """The names of ``fields`` a many-row insert sends an array of (the others, once)."""
    return tuple(f.name for f in fields if not f.once)


def arrays(names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Rows as one array per name, for an ``unnest`` of ``{<prefix>_arrays}``."""
    return {name: [row[name] for row in rows] for name in names}


def _values(fields: Sequence[Field], dialect: Dialect, ref: Mapping[str, str]) -> str:
    """Each stored field's value, its inputs written as ``ref`` says."""
    out = []
    for f in fields:
        if f.stored:
            expr = f.pg if dialect == "postgresql" else f.sqlite
            out.append(expr.format_map(ref) if expr else ref[f.name])
    return ", ".join(out)


def _columns(fields: Sequence[Field]) -> str:
    return ", ".join(f.name for f in fields if f.stored)


def fragments(prefix: str, fields: Sequence[Field], dialect: Dialect) -> dict[str, str]:
    """The pieces of SQL that a store's ``queries.sql`` takes in as ``{<prefix>_<piece>}``
    for an insert of ``fields``:

    - ``columns``: the columns written, for ``INSERT INTO txqueue_tasks (…)``;
    - ``values``: their values from the parameters, for ``VALUES (…)``: PostgreSQL's by
      name, SQLite's by number (``now``: the number of its clock's);
    - ``arrays``, ``inputs``: PostgreSQL's ``unnest(…) AS t(…)`` of the per-row fields'
      arrays (``per_row``), and ``selected``: the values from those, for ``SELECT …``;
    - ``copy``: PostgreSQL's columns of ``COPY txqueue_tasks (…)`` (``copied``).
    """
    if dialect == "sqlite":
        # Numbered, bound from the tuple ``maker`` makes: a tuple is cheaper to build than a
        # dict, and the clock, after the fields, is taken wherever it is needed (``now``).
        ref = {f.name: f"?{i}" for i, f in enumerate(fields, 1)} | {"now": f"?{len(fields) + 1}"}
        return {
            f"{prefix}_columns": _columns(fields),
            f"{prefix}_values": _values(fields, dialect, ref),
            f"{prefix}_now": ref["now"],
        }
    named = {f.name: f"%({f.name})s" + (f"::{f.pg_type}" if f.cast else "") for f in fields}
    rows = [f for f in fields if not f.once]
    return {
        f"{prefix}_columns": _columns(fields),
        f"{prefix}_values": _values(fields, dialect, named),
        f"{prefix}_arrays": ", ".join(f"%({f.name})s::{f.pg_type}[]" for f in rows),
        f"{prefix}_inputs": ", ".join(f.name for f in rows),
        f"{prefix}_selected": _values(fields, dialect, named | {f.name: f.name for f in rows}),
        f"{prefix}_copy": _columns(copied(fields)),
    }


def all_fragments(dialect: Dialect) -> dict[str, str]:
    """The pieces of both inserts, a task's (``task_…``) and a workflow step's
    (``step_…``), for ``sql.Queries``."""
    return fragments("task", TASK, dialect) | fragments("step", STEP_TASK + STEP, dialect)
