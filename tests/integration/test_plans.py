"""The hot queries use their partial indexes, even on a table with a long history, in the
plans they run with: prepared, generic, made whatever size each slot had then."""

from __future__ import annotations

import json

from txqueue.store.postgres.claims import FINISHED, transitions_doc
from txqueue.store.postgres.connection import QUERIES
from txqueue.store.records import Outcome
from txqueue.store.transitions import ended

from .helpers import own_connection, plan_as_run, tasks_read_whole

_CLAIMING = {
    "worker_id": "w",
    "names": ["n"],
    "defaults": "{}",
    "default_timeout": 30.0,
    "default_max_attempts": 5,
}


_POLLING = {**_CLAIMING, "lookahead": 0}


def _applying(doc: str) -> dict[str, object]:
    return {"transitions": doc, "finished": FINISHED, "alone": False}


_FAIR = {**_CLAIMING, "queue": "q", "limit": 10, "after": ""}


def _cte(plan: str, name: str) -> str:
    """The part of a JSON plan that computes the CTE ``name``."""

    def find(node: dict) -> dict | None:
        if node.get("Subplan Name") == f"CTE {name}":
            return node
        return next((f for p in node.get("Plans", []) if (f := find(p))), None)

    found = find(json.loads(plan)[0]["Plan"])
    assert found is not None, plan
    return json.dumps(found)


def test_poll_and_claim_use_the_indexes(pg_url: str) -> None:
    with own_connection(pg_url) as c:
        c.execute(
            "INSERT INTO txqueue_tasks (id, queue, name, state) "
            "SELECT gen_random_uuid(), 'q', 'n', "
            "       (ARRAY['succeeded','failed','pending'])[1 + i % 3] "
            "FROM generate_series(1, 30000) i"
        )
        c.execute("UPDATE txqueue_tasks SET finished_at = now() WHERE state <> 'pending'")
        c.execute("ANALYZE txqueue_tasks")
        poll = plan_as_run(c, QUERIES["claim_ripe"], {"queue": "q", "limit": 10, **_CLAIMING})
        assert "txqueue_tasks_s0_ripe" in poll
        # Read in priority order, not sorted (only the claimed few are, to be returned so).
        assert '"Sort"' not in _cte(poll, "picked")
        keyed = plan_as_run(c, QUERIES["claim_ripe_keyed"], {"queue": "q", "limit": 10, **_POLLING})
        assert "txqueue_tasks_s0_ripe" in keyed
        assert '"Sort"' not in _cte(keyed, "cand")  # only the candidates are, by key
        c.execute("INSERT INTO txqueue_queues (queue, fair_share) VALUES ('q', true)")
        c.execute(
            "UPDATE txqueue_tasks SET concurrency_key = 'k:' || (random() * 50)::int"
            " WHERE state = 'pending'"
        )
        c.execute("ANALYZE txqueue_tasks")
        fair = plan_as_run(c, QUERIES["claim_fair"], _FAIR)
        # Each key found in a step of the index, each key's turn read in priority order,
        # and the queue's turn too.
        assert "txqueue_tasks_s0_fair" in _cte(fair, "ring")
        assert '"Sort"' not in _cte(fair, "keyed") and "_fair" in _cte(fair, "keyed")
        assert "txqueue_tasks_s0_ripe" in _cte(fair, "cand")
        by_id = plan_as_run(c, QUERIES["claim_ids"], {"ids": [], **_CLAIMING})
        assert "txqueue_tasks_s0_pkey" in by_id
        recovering = {"limit": 100, "default_max_attempts": 5}
        recover = plan_as_run(c, QUERIES["lock_expired"], recovering)
        assert "txqueue_tasks_s0_leases" in recover
        prune = plan_as_run(c, QUERIES["prune"], {"state": "succeeded", "age": 60.0, "limit": 100})
        assert "txqueue_tasks_s0_finished" in prune
        holder = plan_as_run(c, QUERIES["live_by_unique_key"], (["k"],))
        assert "txqueue_unique_keys_pkey" in holder
        c.rollback()


def test_claim_by_id_reads_the_primary_key_before_any_analyze(pg_url: str) -> None:
    """A backlog inserted faster than autovacuum analyzes: the planner believes the partial
    indexes tiny, and a claim that filtered on the state there would scan them whole."""
    with own_connection(pg_url) as c:
        c.execute(
            "INSERT INTO txqueue_tasks (id, queue, name) "
            "SELECT gen_random_uuid(), 'q', 'n' FROM generate_series(1, 30000)"
        )
        ids = [r[0] for r in c.execute("SELECT id FROM txqueue_tasks LIMIT 50")]
        for name in ("claim_ids", "claim_ids_keyed"):
            plan = plan_as_run(c, QUERIES[name], {"ids": ids, **_CLAIMING})
            assert "txqueue_tasks_s0_pkey" in plan, name
            assert '_ripe"' not in plan, name
        c.rollback()


def test_a_plan_made_while_the_slots_were_empty_reads_their_indexes(pg_url: str) -> None:
    """A plan is made once and kept while the slots fill and empty: one made while the
    current slot was empty must not read it whole once it holds thousands of tasks."""
    with own_connection(pg_url) as c:
        c.execute("ANALYZE txqueue_tasks_s0")
        plans = {
            "claim_ids": plan_as_run(c, QUERIES["claim_ids"], {"ids": [], **_CLAIMING}),
            "claim_ids_keyed": plan_as_run(c, QUERIES["claim_ids_keyed"], {"ids": [], **_CLAIMING}),
            "claim_ripe": plan_as_run(
                c, QUERIES["claim_ripe"], {"queue": "q", "limit": 10, **_CLAIMING}
            ),
            "claim_ripe_keyed": plan_as_run(
                c, QUERIES["claim_ripe_keyed"], {"queue": "q", "limit": 10, **_POLLING}
            ),
            "claim_fair": plan_as_run(c, QUERIES["claim_fair"], _FAIR),
            "apply": plan_as_run(c, QUERIES["apply"], _applying("[]")),
        }
        for name, plan in plans.items():
            assert "txqueue_tasks_s0_" in plan and tasks_read_whole(plan) == [], name
        c.rollback()


def test_statements_about_known_tasks_read_only_the_primary_key(pg_url: str) -> None:
    """Transitions, heartbeats, progress, release and the cancel check name their tasks: they
    must find them by primary key. A partial index read instead is read whole, and under a
    held vacuum horizon it holds every version of every task since the hold began (measured:
    the outcome write went from 0.07 ms to 15 ms in four minutes; docs/explanation/storage.md)."""
    with own_connection(pg_url) as c:
        c.execute(
            "INSERT INTO txqueue_tasks (id, queue, name, state, worker_id, attempts, expires_at)"
            " SELECT gen_random_uuid(), 'q', 'n',"
            "        CASE WHEN i % 1000 = 0 THEN 'running' ELSE 'succeeded' END, 'w', 1,"
            "        CASE WHEN i % 1000 = 0 THEN now() + interval '1 minute' END"
            " FROM generate_series(1, 30000) i"
        )
        c.execute("ANALYZE txqueue_tasks")
        ids = [r[0] for r in c.execute("SELECT id FROM txqueue_tasks LIMIT 20")]
        outcomes = transitions_doc([ended(Outcome(i, 1, "w", "succeeded")) for i in ids])
        held = {"ids": ids, "attempts": [1] * len(ids), "worker_id": "w"}
        plans = {
            "apply": plan_as_run(c, QUERIES["apply"], _applying(outcomes)),
            "apply, a step's": plan_as_run(
                c, QUERIES["apply"], {**_applying(outcomes), "alone": True}
            ),
            "extend_leases": plan_as_run(
                c, QUERIES["extend_leases"], {**held, "timeouts": [30.0] * len(ids)}
            ),
            "write_progress": plan_as_run(
                c, QUERIES["write_progress"], {**held, "progress": ['{"done": 1}'] * len(ids)}
            ),
            "lock_running": plan_as_run(
                c, QUERIES["lock_running"], {**held, "default_max_attempts": 5}
            ),
            "cancel_requested": plan_as_run(c, QUERIES["cancel_requested"], (ids, "w")),
            # A workflow's steps' children read (and their parents' results), by id too.
            "children": plan_as_run(c, QUERIES["children"], {"ids": ids}),
        }
        for name, plan in plans.items():
            assert "txqueue_tasks_s0_pkey" in plan, name
            for partial in ('_leases"', '_ripe"'):
                assert partial not in plan, (name, partial)
            assert tasks_read_whole(plan) == [], name
        c.rollback()


def test_a_workflows_statements_read_its_index_and_the_edges_keys(pg_url: str) -> None:
    """Its steps through txqueue_tasks_workflow, its edges through their keys: never a slot,
    or the edges, read whole."""
    with own_connection(pg_url) as c:
        c.execute(
            "INSERT INTO txqueue_tasks (id, queue, name, state, workflow_id, step)"
            " SELECT gen_random_uuid(), 'q', 'n', 'succeeded',"
            "        ('00000000-0000-0000-0000-' || lpad((i / 10)::text, 12, '0'))::uuid, 's'"
            " FROM generate_series(1, 30000) i"
        )
        c.execute(
            "INSERT INTO txqueue_waits (parent, child, workflow_id, on_failure)"
            " SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'cancel'"
            " FROM generate_series(1, 30000)"
        )
        c.execute("ANALYZE txqueue_tasks")
        c.execute("ANALYZE txqueue_waits")
        flow = "00000000-0000-0000-0000-000000000042"
        ids = [r[0] for r in c.execute("SELECT id FROM txqueue_tasks LIMIT 20")]
        plans = {
            "workflow_steps": plan_as_run(c, QUERIES["workflow_steps"], (flow,)),
            "open_steps": plan_as_run(c, QUERIES["open_steps"], (flow,)),
            "steps_of": plan_as_run(c, QUERIES["steps_of"], {"ids": ids}),
        }
        for name, plan in plans.items():
            assert "txqueue_tasks_s0_workflow_id_idx" in plan, (name, plan)
            assert tasks_read_whole(plan) == [], name
        freed = plan_as_run(c, QUERIES["free_waits"], {"ids": ids})
        assert "txqueue_waits_pkey" in freed and '"Seq Scan"' not in freed
        left = plan_as_run(c, QUERIES["children"], {"ids": ids})
        assert "txqueue_waits_child" in left and '"Seq Scan"' not in left
        c.rollback()
