"""``txqueue workflow``: the workflows, a page at a time; a workflow's steps and what
became of each; cancel one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated

import typer

from ..app import DEFAULTS
from ..operations.search import SEARCH_LIMIT
from ..workflows.graph import FLOW_STATES, WorkflowInfo, WorkflowSummary
from .app import DatabaseUrl, JsonFlag, _database, friendly, full_flag, group, out
from .output import OPERATOR, SHOWN, cut, print_json, print_page, print_table
from .times import CreatedAfter, CreatedBefore, when

workflow_app = group(
    "workflow",
    "Workflows (txqueue.Workflow): list them; each step's state and the graph; cancel one.",
)

WorkflowId = Annotated[
    str, typer.Argument(help="The workflow's id (a UUID), as enqueue_workflow returned it.")
]


@workflow_app.command("list")
@friendly
def list_(
    state: Annotated[
        str | None,
        typer.Option(
            help=f"One or several, comma-separated, of: {', '.join(FLOW_STATES)}.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The workflow's name.", show_default=False)
    ] = None,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    limit: Annotated[int, typer.Option(min=1, max=SEARCH_LIMIT)] = 50,
    before: Annotated[
        str | None,
        typer.Option(
            help="Start below this workflow id: the last of the page before.", show_default=False
        ),
    ] = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Workflows matching every filter given, newest first, a page at a time: each one's
    state and its steps counted by state."""
    states = None if state is None else [s.strip() for s in state.split(",")]
    with _database(database_url) as (_, conn):
        found = DEFAULTS.list_workflows(
            conn,
            state=states,
            name=name,
            created_after=when("--created-after", created_after),
            created_before=when("--created-before", created_before),
            limit=limit,
            before=before,
        )
    as_json = WorkflowSummary.as_dict if json_output else None
    print_page(out, "workflows", found, limit, as_json, _listing)


def _listing(found: Sequence[WorkflowSummary]) -> None:
    rows = []
    for w in found:
        steps = ", ".join(f"{n} {state}" for state, n in w.steps.items() if n) or "-"
        finished = "-" if w.finished_at is None else w.finished_at.isoformat(timespec="seconds")
        created = w.created_at.isoformat(timespec="seconds")
        rows.append([str(w.id), w.name, w.state, steps, created, finished])
    headers = ["id", "name", "state", "steps", "created_at", "finished_at"]
    print_table(out, headers, rows, whole=(0, 2))


@workflow_app.command()
@friendly
def show(
    workflow_id: WorkflowId,
    full: Annotated[bool, full_flag("each result")] = False,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """A workflow's steps in the order they were declared: each one's state, the steps
    it runs after, and its result or why it did not succeed."""
    with _database(database_url) as (_, conn):
        info = DEFAULTS.get_workflow(conn, workflow_id)
    if json_output:
        print_json(out, info.as_dict())
        return
    _print(info, full)


def _print(info: WorkflowInfo, full: bool) -> None:
    ended = sum(s.state in ("succeeded", "failed", "cancelled") for s in info.steps)
    print_table(
        out,
        None,
        [
            ["workflow", f"{info.name} {info.id}"],
            ["state", info.state],
            ["created_at", info.created_at.isoformat(timespec="milliseconds")],
            ["steps", f"{len(info.steps)}, {ended} ended"],
        ],
    )
    names = {s.id: s.step for s in info.steps}
    rows = []
    for s in info.steps:
        if s.state == "succeeded":
            outcome = json.dumps(s.result)
        else:
            outcome = " ".join(x for x in (s.move, s.reason) if x)
        if not full:
            outcome = cut(outcome, SHOWN // 10, ": --full for all")
        after = ", ".join(names.get(p, str(p)) for p in s.parents) or "-"
        rows.append([s.step, s.name, s.state, after, str(s.attempts), outcome, str(s.id)])
    out.print()
    print_table(
        out,
        ["step", "task", "state", "after", "attempts", "result or reason", "id"],
        rows,
        whole=(2, 4, 6),
    )


@workflow_app.command()
@friendly
def cancel(
    workflow_id: WorkflowId, json_output: JsonFlag = False, database_url: DatabaseUrl = None
) -> None:
    """Cancel every step that has not ended: waiting and pending ones never run, running
    ones' handlers see ctx.cancelled."""
    with _database(database_url) as (_, conn):
        changed = DEFAULTS.cancel_workflow(conn, workflow_id, by=OPERATOR)
    if json_output:
        print_json(out, {"action": "cancel", "id": workflow_id, "changed": changed})
    else:
        out.print(f"workflow {workflow_id}: {changed} steps cancelled", highlight=False)
