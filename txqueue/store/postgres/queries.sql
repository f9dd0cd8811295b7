-- The PostgreSQL store's statements, each under the name its code asks for
-- (txqueue/store/sql.py reads them). Comment lines under a name say why the statement is
-- as it is. Parameters are psycopg's: %s or %(name)s; a literal % is written %%.
-- ===== connection ========================================================
-- name: lock_migrations
-- Transaction-scoped, so it needs no session state (works behind PgBouncer).
SELECT pg_advisory_xact_lock(hashtext('txqueue_migrations'))

-- name: applied_migrations
SELECT version FROM txqueue_migrations

-- name: record_migration
INSERT INTO txqueue_migrations (version) VALUES (%s)

-- name: savepoint
SAVEPOINT txqueue

-- name: rollback_to_savepoint
ROLLBACK TO SAVEPOINT txqueue

-- name: release_savepoint
RELEASE SAVEPOINT txqueue

-- name: check_isolation
SELECT current_setting('default_transaction_isolation')


-- ===== enqueue ===========================================================
-- The task row's columns are not written out here: {task_columns}, {task_values} and their
-- kin (a workflow step's: {step_…}) are made of their declaration in
-- txqueue/store/columns.py (columns.fragments) and filled in when this file is read.

-- name: insert_one
INSERT INTO txqueue_tasks ({task_columns})
VALUES ({task_values})
RETURNING id, pg_current_xact_id()::text,
          CASE WHEN %(note)s::text IS NOT NULL THEN pg_notify('txqueue_wakeup', %(note)s) END

-- name: insert_one_unique
-- The key is taken first, in txqueue_unique_keys (docs/explanation/storage.md), and the task written
-- only if it was. A key its holder is giving back in a transaction still open waits for
-- it, as a unique index does.
WITH k AS (
    INSERT INTO txqueue_unique_keys AS k (unique_key, task_id)
    VALUES (%(unique_key)s, %(id)s)
    ON CONFLICT (unique_key) DO NOTHING
    RETURNING task_id
)
INSERT INTO txqueue_tasks ({task_columns})
SELECT {task_values}
FROM k
RETURNING id, pg_current_xact_id()::text,
          CASE WHEN %(note)s::text IS NOT NULL THEN pg_notify('txqueue_wakeup', %(note)s) END

-- name: insert_many
-- Keys as in insert_one_unique; of two tasks with one key in the list the first takes it.
WITH t AS (
    SELECT * FROM unnest({task_arrays}) WITH ORDINALITY AS t({task_inputs}, n)
), k AS (
    INSERT INTO txqueue_unique_keys AS k (unique_key, task_id)
    SELECT DISTINCT ON (unique_key) unique_key, id FROM t
    WHERE unique_key IS NOT NULL
    ORDER BY unique_key, n
    ON CONFLICT (unique_key) DO NOTHING
    RETURNING task_id
), woken AS (
    SELECT count(pg_notify('txqueue_wakeup', note)) FROM unnest(%(notes)s::text[]) AS note
)
INSERT INTO txqueue_tasks ({task_columns})
SELECT {task_selected}
FROM t
WHERE (unique_key IS NULL OR id IN (SELECT task_id FROM k)) AND (SELECT * FROM woken) >= 0
RETURNING id, pg_current_xact_id()::text

-- name: insert_workflow
INSERT INTO txqueue_workflows (id, name, steps) VALUES (%(id)s, %(name)s, %(steps)s)
RETURNING txqueue_current_slot(), pg_current_xact_id()::text,
          (SELECT count(pg_notify('txqueue_wakeup', note)) FROM unnest(%(notes)s::text[]) AS note)

-- name: copy_steps
COPY txqueue_tasks ({step_copy}, slot) FROM STDIN

-- name: insert_steps
-- A workflow's steps, where COPY cannot take them (a caller's pipeline, a driver other than
-- psycopg's, a first step's run_at or delay).
INSERT INTO txqueue_tasks ({step_columns}, slot)
SELECT {step_selected}, slot
FROM unnest({step_arrays}, %(slot)s::smallint[]) AS t({step_inputs}, slot)

-- name: insert_waits
-- An edge from each parent of each waiting step of the workflow, from the steps' own
-- `parents` (written just before, in the waiting slot): the server writes them, no row of
-- them crosses the wire twice.
INSERT INTO txqueue_waits (parent, child, workflow_id, on_failure)
SELECT p.key::uuid, t.id, t.workflow_id, p.value
FROM txqueue_tasks AS t CROSS JOIN LATERAL jsonb_each_text(t.parents) AS p
WHERE t.workflow_id = %(workflow_id)s AND t.slot = -3

-- name: live_by_unique_key
SELECT k.unique_key, k.task_id, t.name
FROM txqueue_unique_keys AS k JOIN txqueue_tasks AS t ON t.id = k.task_id
WHERE k.unique_key = ANY(%s) AND t.state IN ('pending', 'running', 'parked')

-- name: free_unique_keys
-- Keys whose task has ended without giving them back (ended by a release of txqueue from
-- before this table, or deleted by hand). A later statement than the insert that found
-- the key taken, so it sees the holder as committed. By key, or by the task retried.
DELETE FROM txqueue_unique_keys AS k
WHERE (k.unique_key = ANY(%(keys)s) OR k.unique_key IN (
        SELECT unique_key FROM txqueue_tasks WHERE id = ANY(%(ids)s::uuid[])))
  AND NOT EXISTS (
    SELECT 1 FROM txqueue_tasks AS t WHERE t.id = k.task_id
                  AND t.state IN ('pending', 'running', 'parked'))

-- name: copy_tasks
COPY txqueue_tasks ({task_copy}) FROM STDIN

-- name: current_xid
SELECT pg_current_xact_id()::text

-- name: current_xid_woken
-- After a COPY: the transaction's id, and the wake-ups of what it wrote (notify_wakeups).
SELECT pg_current_xact_id()::text,
       (SELECT count(pg_notify('txqueue_wakeup', note)) FROM unnest(%(notes)s::text[]) AS note)

-- name: notify_wakeups
-- Wake-ups without RabbitMQ: a notification on one channel per queue (its payload says
-- which, and when its task is due if not now: notes.note), sent by PostgreSQL when the
-- caller's transaction commits and never if it rolls back. Two alike in one transaction
-- are sent once.
SELECT count(pg_notify('txqueue_wakeup', note)) FROM unnest(%(notes)s::text[]) AS note

-- name: listen_wakeups
LISTEN txqueue_wakeup


-- ===== claims ============================================================
-- part: claim_set
-- What a claim writes: the lease, the attempt, and what the worker's registry (:defaults,
-- read once as the CTE defs) fills in for rows that leave it unset. The start comes after
-- (claim_start, claim_keyed_update).
SET state = 'running',
    attempts = t.attempts + 1,
    worker_id = %(worker_id)s,
    expires_at = now() + make_interval(secs => coalesce(
        t.timeout, ((SELECT j FROM defs) -> t.name ->> 'timeout')::float8,
        %(default_timeout)s)),
    max_attempts = coalesce(
        t.max_attempts, ((SELECT j FROM defs) -> t.name ->> 'max_attempts')::int,
        %(default_max_attempts)s),
    on_lease_expired = (SELECT j FROM defs) -> t.name -> 'on_lease_expired',
    progress = NULL,  -- an earlier attempt's: this one has said nothing yet
    updated_at = now()

-- part: claim_start
-- A task starts when its claim's turn came, the moment its queue's rate limit logged the
-- claim's starts at (txqueue_room): the statement's now() can be earlier by the wait for
-- the queue's lock, and a second's window read from the starts would then hold more than
-- the limit let through.
    , start_time = coalesce((SELECT logged_at FROM room WHERE room.queue = t.queue), now())

-- part: claim_rows
-- Joined to the picked ids, the rows are found through each slot's primary key: given the
-- ids as an array from a sub-select, the planner scans a slot it knows nothing of (as
-- after each TRUNCATE) whole, until it passes a few dozen pages.
FROM picked AS pk
WHERE t.id = pk.id AND t.slot <> -1
RETURNING t.id, t.queue, t.name, t.payload::text AS payload, t.attempts, t.max_attempts,
          extract(epoch FROM t.expires_at - now())::float8 AS lease, t.priority, t.run_at,
          extract(epoch FROM now() - greatest(t.created_at, t.run_at))::float8 AS waited,
          t.trace_context::text AS trace_context, t.step IS NOT NULL AS step,
          coalesce(t.time_limit, ((SELECT j FROM defs) -> t.name ->> 'time_limit')::float8)
              AS time_limit,
          -- Seconds past its start deadline (negative: before it), if it has one; none
          -- for a task its park or wake-up made pending (it started in time already: its
          -- history, read only where there is a deadline).
          CASE WHEN t.start_by IS NULL AND t.expires_in IS NULL
                    AND (SELECT j FROM defs) -> t.name -> 'expires' IS NULL THEN NULL
               WHEN t.events -> -1 ->> 'move' IN ('parked', 'woken') THEN NULL
               ELSE extract(epoch FROM now() - coalesce(
                   t.start_by, t.run_at + make_interval(secs => coalesce(
                       t.expires_in, ((SELECT j FROM defs) -> t.name ->> 'expires')::float8))
               ))::float8 END AS late

-- part: claim_keys
-- A candidate's concurrency and rate keys, from its registration's limits in :defaults:
-- the argument's name and value (the default's when it was not given), or the task's name.
           CASE WHEN d.c IS NULL THEN NULL
                WHEN d.c ->> 'arg' IS NULL THEN 'task:' || t.name
                ELSE (d.c ->> 'arg') || ':'
                     || coalesce(t.payload ->> (d.c ->> 'arg'), d.c ->> 'default', '')
           END AS ck,
           (d.c ->> 'limit')::int AS cl,
           CASE WHEN d.r IS NULL THEN NULL
                WHEN d.r ->> 'arg' IS NULL THEN 'task:' || t.name
                ELSE (d.r ->> 'arg') || ':'
                     || coalesce(t.payload ->> (d.r ->> 'arg'), d.r ->> 'default', '')
           END AS rk,
           (d.r ->> 'limit')::int AS rl, (d.r ->> 'period')::float8 AS rp

-- part: claim_key_specs
    CROSS JOIN LATERAL (SELECT (SELECT j FROM defs) -> t.name -> 'concurrency' AS c,
                               (SELECT j FROM defs) -> t.name -> 'rate' AS r) AS d

-- part: claim_gates
-- Each key's room (txqueue_key_rooms), after the queues' (the room CTE): keys in order,
-- concurrency keys first; then the candidates that every key they have leaves room for.
keys AS (
    -- `(SELECT count(*) FROM room) >= 0` holds always: it makes the queues' locks come
    -- first. One registry gives a key one limit (Registry.claim_defaults), so max() is it.
    SELECT 'concurrency' AS kind, ck AS k, max(cl) AS lim, NULL::float8 AS period,
           count(*)::int AS n
    FROM cand WHERE ck IS NOT NULL AND (SELECT count(*) FROM room) >= 0 GROUP BY ck
    UNION ALL
    SELECT 'rate', rk, max(rl), max(rp), count(*)::int
    FROM cand WHERE rk IS NOT NULL AND (SELECT count(*) FROM room) >= 0 GROUP BY rk
), keyroom AS (
    SELECT r.kind, r.k, r.room, r.retry_in, r.logged_at, x.period
    FROM (SELECT array_agg(kind ORDER BY kind, k) AS kinds, array_agg(k ORDER BY kind, k) AS ks,
                 array_agg(lim ORDER BY kind, k) AS lims,
                 array_agg(period ORDER BY kind, k) AS periods,
                 array_agg(n ORDER BY kind, k) AS wanted
          FROM keys) AS a,
         txqueue_key_rooms(a.kinds, a.ks, a.lims, a.periods, a.wanted) AS r
    JOIN keys AS x ON x.kind = r.kind AND x.k = r.k
), rooms AS (
    -- Looked up by key, one candidate at a time, without a join the planner might loop.
    SELECT jsonb_object_agg(kind || ':' || k, room) AS m FROM keyroom
), admitted AS (
    SELECT c.* FROM (
        SELECT cand.*,
               row_number() OVER (PARTITION BY ck ORDER BY priority DESC, run_at, id) AS cn,
               row_number() OVER (PARTITION BY rk ORDER BY priority DESC, run_at, id) AS rn
        FROM cand) AS c
    WHERE (c.ck IS NULL OR c.cn <= ((SELECT m FROM rooms) ->> ('concurrency:' || c.ck))::int)
      AND (c.rk IS NULL OR c.rn <= ((SELECT m FROM rooms) ->> ('rate:' || c.rk))::int)
)

-- part: claim_keyed_update
-- The claim, with each task's concurrency key written for the claims that count them (the
-- one written at enqueue, where this registry gives the task none), and its start when
-- its queue's limit, or else its rate key's, logged it (as claim_start).
UPDATE txqueue_tasks AS t
-- with part: claim_set
    , concurrency_key = coalesce(pk.ck, t.concurrency_key),
    start_time = coalesce((SELECT logged_at FROM room WHERE room.queue = t.queue),
                          (SELECT kr.logged_at FROM keyroom AS kr
                           WHERE kr.kind = 'rate' AND kr.k = pk.rk), now())
-- with part: claim_rows

-- part: claim_log_queues
-- The claim's starts, a row per rate-limited queue (and key) it started tasks of.
    INSERT INTO txqueue_starts (bucket, at, until, n)
    SELECT 'queue:' || c.queue, room.logged_at,
           room.logged_at + make_interval(secs => room.rate_period), count(*)
    FROM claimed AS c JOIN room USING (queue) WHERE room.logged_at IS NOT NULL
    GROUP BY c.queue, room.logged_at, room.rate_period

-- part: claim_log_keys
    UNION ALL
    SELECT 'key:' || kr.k, kr.logged_at, kr.logged_at + make_interval(secs => kr.period),
           count(*)
    FROM claimed AS c JOIN picked AS p ON p.id = c.id
    JOIN keyroom AS kr ON kr.kind = 'rate' AND kr.k = p.rk
    GROUP BY kr.k, kr.logged_at, kr.period

-- part: claim_keyed_logged
-- The keyed claims' claim and the starts it logs, after the CTE of the tasks it picked.
), claimed AS (
-- with part: claim_keyed_update
), logged AS (
-- with part: claim_log_queues
-- with part: claim_log_keys

-- part: claim_keyed_held
-- Then why fewer came than asked: the queue's reason, else `key` when a key held a
-- candidate back. The statement goes on with when one more may start.
-- with part: claim_keyed_logged
), held AS (
    SELECT coalesce(room.held, CASE WHEN (SELECT count(*) FROM admitted)
                                         < (SELECT count(*) FROM cand)
                                    THEN 'key' END) AS held,

-- part: claim_ids_room
-- The room each queue's settings leave, queues asked in name order.
room AS (
    SELECT w.queue, r.room, r.logged_at, r.rate_period
    FROM (SELECT queue, count(*)::int AS n FROM cand GROUP BY queue ORDER BY queue) AS w,
         LATERAL txqueue_room(w.queue, w.n) AS r
)

-- part: claim_ids_result
SELECT id, queue, name, payload, attempts, max_attempts, lease, waited, trace_context, step,
       time_limit, late
FROM claimed
ORDER BY priority DESC, run_at, id

-- name: claim_ids
-- The rows are found by id alone: with `state = 'pending'` here, a table filled faster than
-- autovacuum analyzes it (a burst, a backlog) gets its partial indexes, which the planner
-- believes tiny, scanned whole on every claim. So rows in any state are locked, and waiting
-- for one that another worker's outcome write holds could deadlock with it: locked rows are
-- skipped instead, and the worker asks about their wake-ups again as it does for a commit
-- it has not seen yet. The state is checked on what the lock returns, the row's latest
-- version, so a row another worker just claimed is dropped. Each queue's settings may hold
-- some back (txqueue_room, in schema.sql), best priority first; queues are asked in name
-- order, so that two claims never deadlock.
WITH defs AS (
    SELECT %(defaults)s::jsonb AS j
), locked AS (
    SELECT id, queue, name, state, run_at, priority FROM txqueue_tasks
    WHERE id = ANY(%(ids)s) AND slot <> -1
    FOR UPDATE SKIP LOCKED
), cand AS (
    SELECT id, queue, priority, run_at FROM locked
    WHERE state = 'pending' AND run_at <= now() AND name = ANY(%(names)s)
),
-- with part: claim_ids_room
, picked AS (
    SELECT p.id
    FROM (SELECT id, queue, row_number() OVER (PARTITION BY queue
                                               ORDER BY priority DESC, run_at, id) AS n
          FROM cand) AS p
    JOIN room USING (queue)
    WHERE p.n <= room.room
), claimed AS (
UPDATE txqueue_tasks AS t
-- with part: claim_set
-- with part: claim_start
-- with part: claim_rows
), logged AS (
-- with part: claim_log_queues
)
-- with part: claim_ids_result

-- name: claim_ids_keyed
-- claim_ids for a worker whose registry gives tasks limits of their own: each task key's
-- room (txqueue_key_rooms) may hold some back too, best priority first; queues are asked
-- first, then keys, each in order, so that two claims never deadlock.
WITH defs AS (
    SELECT %(defaults)s::jsonb AS j
), locked AS (
    SELECT id, queue, name, state, run_at, priority, payload FROM txqueue_tasks
    WHERE id = ANY(%(ids)s) AND slot <> -1
    FOR UPDATE SKIP LOCKED
), cand AS (
    SELECT t.id, t.queue, t.priority, t.run_at,
    -- with part: claim_keys
    FROM locked AS t
    -- with part: claim_key_specs
    WHERE t.state = 'pending' AND t.run_at <= now() AND t.name = ANY(%(names)s)
),
-- with part: claim_ids_room
,
-- with part: claim_gates
, picked AS (
    SELECT a.id, a.ck, a.rk
    FROM (SELECT admitted.*, row_number() OVER (PARTITION BY queue
                                                ORDER BY priority DESC, run_at, id) AS qn
          FROM admitted) AS a
    JOIN room USING (queue)
    WHERE a.qn <= room.room
-- with part: claim_keyed_logged
)
-- with part: claim_ids_result

-- name: claim_ripe
-- One queue per statement: with `queue = ANY(...)` PostgreSQL cannot read the index in
-- priority order and sorts every pending row instead (guarded by test_plans.py). As many
-- as the queue's settings leave room for (txqueue_room), whose answer comes back on every
-- row, and alone on one row of NULLs when nothing was claimed.
WITH defs AS (
    SELECT %(defaults)s::jsonb AS j
), room AS (
    SELECT %(queue)s::text AS queue, r.* FROM txqueue_room(%(queue)s, %(limit)s) AS r
), picked AS (
    SELECT id FROM txqueue_tasks
    WHERE state = 'pending' AND queue = %(queue)s AND run_at <= now()
      AND name = ANY(%(names)s) AND slot <> -1
    ORDER BY priority DESC, run_at, id
    LIMIT (SELECT room FROM room)
    FOR UPDATE SKIP LOCKED
), claimed AS (
UPDATE txqueue_tasks AS t
-- with part: claim_set
-- with part: claim_start
-- with part: claim_rows
), logged AS (
-- with part: claim_log_queues
)
SELECT c.id, c.queue, c.name, c.payload, c.attempts, c.max_attempts, c.lease, c.waited,
       c.trace_context, c.step, c.time_limit, c.late, room.held, room.retry_in
FROM room LEFT JOIN claimed AS c ON true
ORDER BY c.priority DESC, c.run_at, c.id

-- name: claim_ripe_keyed
-- claim_ripe for a worker whose registry gives tasks limits of their own (as
-- claim_ids_keyed), taking :lookahead more candidates than the queue's room, past the
-- tasks of keys at their limit. `key` comes back when a key held a candidate back.
WITH defs AS (
    SELECT %(defaults)s::jsonb AS j
), room AS (
    SELECT %(queue)s::text AS queue, r.* FROM txqueue_room(%(queue)s, %(limit)s) AS r
), cand AS (
    SELECT t.id, t.queue, t.priority, t.run_at,
    -- with part: claim_keys
    FROM txqueue_tasks AS t
    -- with part: claim_key_specs
    WHERE t.state = 'pending' AND t.queue = %(queue)s AND t.run_at <= now()
      AND t.name = ANY(%(names)s) AND t.slot <> -1
    ORDER BY t.priority DESC, t.run_at, t.id
    LIMIT (SELECT room + CASE WHEN room > 0 THEN %(lookahead)s ELSE 0 END FROM room)
    FOR UPDATE OF t SKIP LOCKED
),
-- with part: claim_gates
, picked AS (
    SELECT id, ck, rk FROM admitted
    ORDER BY priority DESC, run_at, id
    LIMIT (SELECT room FROM room)
-- with part: claim_keyed_held
           coalesce(room.retry_in, (SELECT min(retry_in) FROM keyroom)) AS retry_in
    FROM room
)
SELECT c.id, c.queue, c.name, c.payload, c.attempts, c.max_attempts, c.lease, c.waited,
       c.trace_context, c.step, c.time_limit, c.late, held.held, held.retry_in
FROM held LEFT JOIN claimed AS c ON true
ORDER BY c.priority DESC, c.run_at, c.id

-- name: claim_fair
-- The poll of a fair-share queue, whose keys take turns. A skip scan of txqueue_tasks_fair
-- finds the keys after :after (the claimer's place in the round, '' at its start), as many
-- as the room; each brings its share of the room, its first ripe tasks, best priority first.
-- The queue's plain order fills the room left, and has a share of its own when the round
-- ends (tasks without a key have their turns so). Then each key's first task, in the keys'
-- order, then each key's second, ... as many as the room, through the keys' limits as in
-- claim_ripe_keyed. `after` comes back: where the next poll goes on ('' when the round
-- ended). The round is as long as the queue's room, not the worker's free threads: a
-- limited queue's round, sized so, would end at each poll and start over at its first key.
WITH RECURSIVE defs AS (
    SELECT %(defaults)s::jsonb AS j
), room AS (
    SELECT %(queue)s::text AS queue, r.* FROM txqueue_room(%(queue)s, %(limit)s, true) AS r
), ring (k, pos) AS (
    SELECT (SELECT min(x.concurrency_key) FROM txqueue_tasks AS x
            WHERE x.state = 'pending' AND x.queue = %(queue)s AND x.slot <> -1
              AND x.concurrency_key > %(after)s), 1
    WHERE (SELECT room FROM room) > 0
    UNION ALL
    SELECT (SELECT min(x.concurrency_key) FROM txqueue_tasks AS x
            WHERE x.state = 'pending' AND x.queue = %(queue)s AND x.slot <> -1
              AND x.concurrency_key > ring.k), ring.pos + 1
    FROM ring WHERE ring.k IS NOT NULL AND ring.pos < (SELECT room FROM room)
), found AS (
    SELECT k, pos FROM ring WHERE k IS NOT NULL
), round AS (
    SELECT count(*)::int AS n, (SELECT room FROM room) AS room,
           count(*) < (SELECT room FROM room) AS ends, max(k) AS last
    FROM found
), share AS (
    SELECT ceil(room::float8 / greatest(n + CASE WHEN ends THEN 1 ELSE 0 END, 1))::int AS n
    FROM round
), keyed AS (
    SELECT c.*, found.pos FROM found CROSS JOIN LATERAL (
        SELECT t.id, t.queue, t.priority, t.run_at,
        -- with part: claim_keys
        FROM txqueue_tasks AS t
        -- with part: claim_key_specs
        WHERE t.state = 'pending' AND t.queue = %(queue)s AND t.concurrency_key = found.k
          AND t.run_at <= now() AND t.name = ANY(%(names)s) AND t.slot <> -1
        ORDER BY t.priority DESC, t.run_at, t.id
        LIMIT (SELECT n FROM share)
        FOR UPDATE OF t SKIP LOCKED) AS c
), cand AS (
    SELECT * FROM keyed
    UNION ALL
    SELECT c.*, (SELECT n FROM round) + 1 FROM (
        SELECT t.id, t.queue, t.priority, t.run_at,
        -- with part: claim_keys
        FROM txqueue_tasks AS t
        -- with part: claim_key_specs
        WHERE t.state = 'pending' AND t.queue = %(queue)s AND t.run_at <= now()
          AND t.name = ANY(%(names)s) AND t.slot <> -1
          AND t.id <> ALL (ARRAY(SELECT id FROM keyed))
        ORDER BY t.priority DESC, t.run_at, t.id
        LIMIT (SELECT greatest(room - (SELECT count(*) FROM keyed)::int, 0) FROM round)
        FOR UPDATE OF t SKIP LOCKED) AS c
),
-- with part: claim_gates
, picked AS (
    SELECT id, ck, rk FROM (
        SELECT admitted.*, row_number() OVER (PARTITION BY pos
                                              ORDER BY priority DESC, run_at, id) AS turn
        FROM admitted) AS a
    ORDER BY turn, pos
    LIMIT (SELECT room FROM room)
-- with part: claim_keyed_held
           coalesce(room.retry_in, (SELECT min(retry_in) FROM keyroom)) AS retry_in,
           CASE WHEN round.room = 0 THEN %(after)s  -- no turn was had: the round waits
                WHEN round.ends THEN '' ELSE round.last END AS after
    FROM room, round
)
SELECT c.id, c.queue, c.name, c.payload, c.attempts, c.max_attempts, c.lease, c.waited,
       c.trace_context, c.step, c.time_limit, c.late, held.held, held.retry_in, held.after
FROM held LEFT JOIN claimed AS c ON true
ORDER BY c.priority DESC, c.run_at, c.id

-- name: xact_status
SELECT x.xid, pg_xact_status(x.xid::xid8) FROM unnest(%s::text[]) AS x(xid)

-- name: rows_by_id
SELECT t.id, t.state, t.run_at, t.run_at <= now(), t.name,
       EXISTS (SELECT FROM txqueue_queues AS q
               WHERE q.queue = t.queue
                 AND (q.paused OR q.rate_limit IS NOT NULL OR q.concurrency IS NOT NULL
                      OR q.fair_share))
FROM txqueue_tasks AS t WHERE t.id = ANY(%s)

-- name: apply
-- Transitions, decided by lifecycle.py, one statement a batch. Each brings its fence (the
-- state the task must be in; the attempt and the worker when set), the state to write and
-- the one to write instead if the task's cancellation was requested meanwhile, read from
-- the row as locked, so a cancel that commits while this waits for the lock still counts.
-- A transition fenced out writes nothing and is not returned. A key it leaves out is NULL
-- (claims.transitions_doc): a flag then is false. One that finishes a task
-- gives its unique key back, and its id goes to `txqueue.wait` callers as a notification,
-- 200 ids to one (a payload holds at most 8,000 bytes), sent by PostgreSQL when the write
-- commits; the condition on `notified` makes them go out before the rows are returned.
-- Each appends its event to the task's history, in the row it changes; a claim's event is
-- the one the attempt's next change writes (`started`, `worker`).
-- A workflow's step it ends has its edges deleted and its children locked here, for the
-- follow-up to decide them in the same transaction (store/follow.py). Run on its own
-- (%(alone)s: autocommit, no transaction to hold the follow-up), the statement leaves a
-- step that a child still waits for, and returns it with a NULL state: the store applies
-- it again in a transaction (Claims.apply).
-- The rows are locked by id alone and the fence is checked on what the lock returns: with
-- `t.state = 'running'` beside the join, the planner may read the running index whole,
-- every version of every task that ran since vacuum last could clean up, which a held
-- vacuum horizon makes longer by the second (docs/explanation/storage.md). Every statement
-- about known tasks below does the same.
WITH tr AS (
    SELECT * FROM jsonb_to_recordset(%(transitions)s::jsonb)
         AS tr(id uuid, attempt int, worker_id text, "from" text, "to" text,
               if_cancelled text, result text, error jsonb, run_in float8, lease_ends bool,
               undoes_claim bool, requests_cancel bool, move text, by text, reason text,
               inputs text, progress text, wait_key text)
), locked AS (
    SELECT id, attempts, worker_id, state, cancel_requested, step, parent_id FROM txqueue_tasks
    WHERE id = ANY(ARRAY(SELECT id FROM tr)) AND slot <> -1
    FOR UPDATE
), deferred AS (
    -- Whatever its move: one that does not end the step, or is fenced out, is only
    -- applied in a transaction a round trip later. So too a move that may end a child
    -- (its end signals its parent, in the follow-up).
    SELECT l.id FROM locked AS l
    WHERE %(alone)s
      AND ((l.step IS NOT NULL AND EXISTS (SELECT 1 FROM txqueue_waits AS w WHERE w.parent = l.id))
           OR (l.parent_id IS NOT NULL
               AND EXISTS (SELECT 1 FROM tr WHERE tr.id = l.id AND (tr."to" = ANY(%(finished)s::text[])
                                                                 OR tr.if_cancelled IS NOT NULL))))
), signalled AS (
    -- The keys of the waits it parks whose signal was sent already: those run again now.
    SELECT txqueue_signalled(array_agg(wait_key)) AS keys FROM tr
    WHERE "to" = 'parked' AND wait_key IS NOT NULL HAVING count(*) > 0
), d AS (
    SELECT tr.*, l.state AS was,
           CASE WHEN l.cancel_requested AND tr.if_cancelled IS NOT NULL THEN tr.if_cancelled
                WHEN EXISTS (SELECT 1 FROM signalled AS s WHERE tr.wait_key = ANY(s.keys))
                THEN 'pending'
                ELSE tr."to" END AS next
    FROM tr JOIN locked AS l ON l.id = tr.id
    WHERE l.state = tr."from" AND (tr.attempt IS NULL OR l.attempts = tr.attempt)
      AND (tr.worker_id IS NULL OR l.worker_id = tr.worker_id)
      AND l.id <> ALL(ARRAY(SELECT id FROM deferred))
), written AS (
UPDATE txqueue_tasks AS t
SET state = d.next,
    -- A step readied, a task woken or retried by hand, goes to the current slot (a step
    -- readied with its parents' results merged into its arguments); a step rearmed, or a
    -- task parked, to the waiting slot.
    slot = CASE WHEN d.next = 'pending' AND d.was IN ('waiting', 'parked', 'failed', 'cancelled')
                THEN txqueue_current_slot()
                WHEN d.next IN ('waiting', 'parked') THEN -3 ELSE t.slot END,
    payload = CASE WHEN d.inputs IS NULL THEN t.payload ELSE t.payload || d.inputs::jsonb END,
    result = CASE WHEN d.result IS NULL THEN t.result ELSE d.result::jsonb END,
    progress = CASE WHEN d.progress IS NULL THEN t.progress ELSE d.progress::jsonb END,
    errors = CASE WHEN d.error IS NULL THEN t.errors
                  ELSE t.errors || jsonb_build_array(d.error) END,
    -- A step readied is due from now (its start deadline and wait count from here), or
    -- when its own delay ends; a task parked, when it wakes (its run_in), or now if its
    -- signal had come.
    run_at = CASE WHEN d."to" = 'parked' AND d.next = 'pending' THEN now()
                  WHEN d.next IN ('pending', 'parked') AND d.run_in IS NOT NULL
                  THEN now() + make_interval(secs => d.run_in)
                  WHEN d.was = 'waiting' THEN greatest(t.run_at, now()) ELSE t.run_at END,
    finished_at = CASE WHEN d.next = ANY(%(finished)s::text[]) THEN now() END,
    expires_at = CASE WHEN d.next <> 'running' THEN NULL
                      WHEN d.lease_ends THEN now() ELSE t.expires_at END,
    attempts = CASE WHEN d.undoes_claim THEN t.attempts - 1 ELSE t.attempts END,
    start_time = CASE WHEN d.undoes_claim AND t.attempts = 1 THEN NULL ELSE t.start_time END,
    worker_id = CASE WHEN d.undoes_claim THEN NULL ELSE t.worker_id END,
    -- Out of a finished state (a retry by hand): the cancel request cleared, an attempt
    -- more if none was left (NULL stays the registry's), its wake-up to be sent again.
    cancel_requested = CASE WHEN d.was IN ('failed', 'cancelled') THEN false
                            ELSE t.cancel_requested OR coalesce(d.requests_cancel, false) END,
    -- A park gives the task its attempt back (lifecycle.parked).
    max_attempts = CASE WHEN d.was IN ('failed', 'cancelled') AND d.next = 'pending'
                            AND t.max_attempts IS NOT NULL
                        THEN greatest(t.max_attempts, t.attempts + 1)
                        WHEN d."to" = 'parked' AND d.next <> 'cancelled'
                        THEN t.max_attempts + 1 ELSE t.max_attempts END,
    notified_at = CASE WHEN d.was IN ('failed', 'cancelled') THEN NULL ELSE t.notified_at END,
    -- A change of a running task carries its attempt's claim (when, by which worker): the
    -- claim itself writes no event, and its line is read from here (task.timeline). The
    -- history is the largest part of a finished task's row, so an entry keeps its times
    -- as Unix seconds and leaves out what the rest says (Event.of_json): the move where it
    -- is the state it went to, where it came from if running, who made it if the
    -- attempt's worker (null if no one made a running task's change).
    events = t.events || (jsonb_strip_nulls(jsonb_build_object(
        'at', extract(epoch FROM now()), 'attempt', t.attempts, 'move', nullif(d.move, d.next),
        'from', nullif(d.was, 'running'), 'to', d.next,
        'by', CASE WHEN d.was <> 'running' OR d.by IS DISTINCT FROM t.worker_id THEN d.by END,
        'reason', d.reason,
        'started', CASE WHEN d.was = 'running' THEN extract(epoch FROM t.start_time) END,
        'worker', CASE WHEN d.was = 'running' THEN t.worker_id END))
        || CASE WHEN d.was = 'running' AND d.by IS NULL THEN '{"by": null}' ELSE '{}' END::jsonb),
    wait_key = CASE WHEN d.next = 'parked' THEN d.wait_key END,
    updated_at = now()
FROM d
WHERE t.id = d.id AND t.slot <> -1
RETURNING t.id, t.state, t.unique_key, t.step,
          -- Made ready to run now: its wake-up (readied, woken, retried by hand, a wait
          -- whose signal had come).
          CASE WHEN t.state = 'pending' AND (d.was IN ('waiting', 'parked', 'failed', 'cancelled')
                                             OR d."to" = 'parked')
               THEN t.queue END AS readied,
          -- A step this ended: its edges are freed below.
          t.step IS NOT NULL AND t.state = ANY(%(finished)s::text[]) AS frees,
          -- A child this ended: its parent is signalled in the follow-up (store/follow.py).
          t.parent_id IS NOT NULL AND t.state = ANY(%(finished)s::text[]) AS signals
), freed AS (
    -- The edges from the steps this ended, deleted in this write; each child locked
    -- (txqueue_lock_steps). The children are read in the next statement, whose
    -- snapshot, taken after the locks, sees the edges that other parents' ends deleted
    -- and committed first. Alone, a step it ended had none (deferred): skipped.
    DELETE FROM txqueue_waits
    WHERE NOT %(alone)s AND parent = ANY(ARRAY(SELECT id FROM written WHERE frees))
    RETURNING child, parent, workflow_id, on_failure
), children_locked AS (
    SELECT txqueue_lock_steps(array_agg(workflow_id), array_agg(child)) FROM freed
    HAVING count(*) > 0
), children AS (
    SELECT parent, array_agg(ARRAY[child::text, on_failure]) AS edges
    FROM freed GROUP BY parent
), unkeyed AS (
    DELETE FROM txqueue_unique_keys AS k USING written AS w
    WHERE k.unique_key = w.unique_key AND k.task_id = w.id
      AND w.state = ANY(%(finished)s::text[])
), notified AS (
    SELECT pg_notify('txqueue_finished', string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER () - 1) / 200 AS part
          FROM written WHERE state = ANY(%(finished)s::text[])) AS finished
    GROUP BY part
)
-- An ended step's row carries the edges deleted from it (child, OnFailure), none being
-- an empty array: the follow-up asks no more (store/follow.py).
SELECT w.id, w.state, w.step, w.readied,
       CASE WHEN w.readied IS NOT NULL THEN pg_current_xact_id()::text END,
       CASE WHEN w.frees THEN coalesce(c.edges, '{}') END, w.signals
FROM written AS w LEFT JOIN children AS c ON c.parent = w.id
WHERE (SELECT count(*) FROM notified) >= 0 AND (SELECT count(*) FROM children_locked) >= 0
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, false FROM deferred

-- name: free_waits
-- As apply's `freed`, for steps that ended before (the cleaner's repair of a step left
-- with an edge): the edges from them deleted, each child locked in one order.
WITH freed AS (
    DELETE FROM txqueue_waits WHERE parent = ANY(%(ids)s::uuid[])
    RETURNING child, parent, workflow_id, on_failure
), locked AS (
    SELECT txqueue_lock_steps(array_agg(workflow_id), array_agg(child)) FROM freed
    HAVING count(*) > 0
)
SELECT child, parent, on_failure FROM freed WHERE (SELECT count(*) FROM locked) >= 0

-- name: children
-- The steps free_waits locked, read in a statement of their own: its snapshot, taken after
-- the locks, sees the edges that other parents' ends deleted and committed first. With
-- them, for each one no edge is left to, the parents its inputs take results from (the
-- rows whose `waits` is NULL): their state, result, and why one did not succeed (its last
-- error, else the reason its last event gives). Where those parents are half a workflow's
-- steps or more, the workflow's steps are read (one range of its index: the ten thousand
-- parents of a join in a third of the time their ids take).
WITH c AS (
    SELECT c.id, c.state, c.inputs, c.workflow_id, f.steps,
           EXISTS (SELECT 1 FROM txqueue_waits AS w WHERE w.child = c.id) AS waits
    FROM txqueue_tasks AS c LEFT JOIN txqueue_workflows AS f ON f.id = c.workflow_id
    WHERE c.id = ANY(%(ids)s::uuid[]) AND c.slot <> -1
), ready AS (
    SELECT c.inputs, c.workflow_id,
           2 * (SELECT sum(CASE jsonb_typeof(i.value -> 'from')
                           WHEN 'array' THEN jsonb_array_length(i.value -> 'from') ELSE 1 END)
                FROM jsonb_each(c.inputs) AS i) >= c.steps AS whole
    FROM c WHERE c.state = 'waiting' AND NOT c.waits AND c.inputs IS NOT NULL
), refs AS (
    SELECT DISTINCT f.id::uuid AS id
    FROM ready AS c CROSS JOIN LATERAL jsonb_each(c.inputs) AS i
    CROSS JOIN LATERAL jsonb_array_elements_text(
        CASE jsonb_typeof(i.value -> 'from') WHEN 'array' THEN i.value -> 'from'
             ELSE jsonb_build_array(i.value -> 'from') END) AS f (id)
    WHERE NOT c.whole
)
SELECT c.id::text, c.state, c.waits, c.inputs::text, NULL::text, NULL::text FROM c
UNION ALL
SELECT p.id::text, p.state, NULL, NULL, p.result::text,
       coalesce((p.errors -> -1 ->> 'type') || ': ' || (p.errors -> -1 ->> 'message'),
                p.events -> -1 ->> 'reason')
FROM txqueue_tasks AS p
WHERE p.workflow_id = ANY(ARRAY(SELECT workflow_id FROM ready WHERE whole))
   OR p.id = ANY(ARRAY(SELECT id FROM refs))

-- name: lock_running
-- The running tasks a worker holds, for lifecycle to decide their release on.
WITH locked AS (
    SELECT id, queue, name, payload, attempts, max_attempts, worker_id, state,
           on_lease_expired, cancel_requested
    FROM txqueue_tasks
    WHERE id = ANY(%(ids)s::uuid[]) AND slot <> -1
    FOR UPDATE
)
SELECT l.id, l.queue, l.name, l.payload, l.attempts,
       coalesce(l.max_attempts, %(default_max_attempts)s), l.worker_id, l.on_lease_expired,
       l.cancel_requested, now()
FROM locked AS l
JOIN unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS u(id, attempt)
  ON u.id = l.id AND u.attempt = l.attempts
WHERE l.worker_id = %(worker_id)s AND l.state = 'running'

-- name: outcomes_landed
-- Of outcomes a retried write found fenced out, those an earlier try wrote after all (its
-- commit's reply was lost with the connection), with the state each left. The row says so
-- when this worker's error for the attempt is in the history, or the attempt is still the
-- row's, it is this worker's, it has ended, and the cleaner did not end it. A task retried
-- since (attempts moved on) shows its pending retry. A finished task may have moved to
-- the history by now (slot -1): read there too.
SELECT t.id, CASE WHEN t.attempts = o.attempt THEN t.state ELSE 'pending' END
FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o(id uuid, attempt int, worker_id text)
JOIN txqueue_tasks AS t ON t.id = o.id
WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(t.errors) AS e
              WHERE (e->>'attempt')::int = o.attempt AND e->>'worker_id' = o.worker_id
                AND e->>'type' <> %(lease_expired)s)
   OR (t.attempts = o.attempt AND t.worker_id = o.worker_id AND t.state <> 'running'
       AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(t.errors) AS e
                       WHERE (e->>'attempt')::int = o.attempt
                         AND e->>'type' = %(lease_expired)s))

-- part: own_attempts_locked
-- The rows of this worker's attempts (:ids) that no one else holds: locked, or skipped.
WITH locked AS (
    SELECT id, attempts, worker_id, state FROM txqueue_tasks
    WHERE id = ANY(%(ids)s::uuid[]) AND slot <> -1
    FOR UPDATE SKIP LOCKED
)

-- part: own_attempts_end
-- Of those, the attempts `a` (id, attempt) names that are still this worker's, running.
JOIN locked AS x ON x.id = a.id
WHERE t.id = x.id AND t.slot <> -1 AND x.attempts = a.attempt
  AND x.worker_id = %(worker_id)s
  AND x.state = 'running'
RETURNING t.id

-- name: extend_leases
-- A row locked by someone else is skipped, not waited for: it is being finished (this
-- worker's own outcome, a slow write) or recovered (the cleaner), and waiting would hold
-- up the extension of every other lease in the batch.
-- with part: own_attempts_locked
UPDATE txqueue_tasks AS t
SET expires_at = now() + make_interval(secs => a.timeout), updated_at = now()
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(timeouts)s::float8[])
     AS a(id, attempt, timeout)
-- with part: own_attempts_end

-- name: write_progress
-- Running tasks' progress as their handlers last reported it. A row locked by someone else
-- is skipped, as in extend_leases: it is being finished, and its outcome carries the
-- progress, or recovered.
-- with part: own_attempts_locked
UPDATE txqueue_tasks AS t
SET progress = a.progress::jsonb
FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(progress)s::text[])
     AS a(id, attempt, progress)
-- with part: own_attempts_end

-- name: cancel_requested
WITH asked AS MATERIALIZED (
    SELECT id, worker_id, state, cancel_requested FROM txqueue_tasks
    WHERE id = ANY(%s) AND slot <> -1
)
SELECT id FROM asked WHERE worker_id = %s AND state = 'running' AND cancel_requested


-- ===== upkeep ============================================================
-- name: stale_queues
SELECT DISTINCT queue FROM txqueue_tasks
WHERE state = 'pending' AND slot <> -1 AND run_at <= now() - make_interval(secs => %(grace)s)
    AND (notified_at IS NULL OR notified_at <= now() - make_interval(secs => %(grace)s))

-- name: renotify
WITH stale AS (
    SELECT id FROM txqueue_tasks
    WHERE state = 'pending' AND slot <> -1
      AND run_at <= now() - make_interval(secs => %(grace)s)
      AND (notified_at IS NULL OR notified_at <= now() - make_interval(secs => %(grace)s))
      AND queue = ANY(%(queues)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE txqueue_tasks AS t SET notified_at = now()
WHERE t.id = ANY(ARRAY(SELECT id FROM stale)) AND t.slot <> -1
RETURNING t.id, t.queue, pg_current_xact_id()::text

-- name: lock_expired
-- Running tasks whose lease expired, for lifecycle to decide their recovery on; locked
-- until the cleaner's transaction applies it, so two cleaners never act on one task.
SELECT id, queue, name, payload, attempts, coalesce(max_attempts, %(default_max_attempts)s),
       worker_id, on_lease_expired, cancel_requested, now()
FROM txqueue_tasks
WHERE state = 'running' AND expires_at < now() AND slot <> -1
ORDER BY expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: prune
-- A workflow's steps stay until every one of them is old enough: a step readied reads its
-- parents' results, and a retry by hand their states.
WITH old AS (
    SELECT id FROM txqueue_tasks AS t
    WHERE state = %(state)s AND finished_at < now() - make_interval(secs => %(age)s)
      AND (workflow_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM txqueue_tasks AS o
          WHERE o.workflow_id = t.workflow_id
            AND (o.finished_at IS NULL
                 OR o.finished_at >= now() - make_interval(secs => %(age)s))))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM txqueue_tasks WHERE id = ANY(ARRAY(SELECT id FROM old))


-- name: prune_starts
-- The starts no rate window holds any more that no claim came to delete (a claim deletes
-- only the last period's worth, txqueue_rate_room).
DELETE FROM txqueue_starts WHERE until < now()

-- ===== manage ============================================================
-- name: bring_back
-- Finished tasks a retry by hand is about to move, out of the history into the current
-- slot: `apply` locks the live slots only (the history is read by id elsewhere). Where
-- a row is kept, not its state.
UPDATE txqueue_tasks SET slot = txqueue_current_slot()
WHERE id = ANY(%s::uuid[]) AND slot = -1 AND state IN ('failed', 'cancelled')

-- name: retriable
-- The tasks a retry by hand may move, locked: failed or cancelled, and a workflow's step
-- only while no parent is left to end and every parent it does not run without (its
-- edge's on_failure) succeeded: retrying that parent rearms it. Each with its unique key,
-- and whether a live task holds it (free_unique_keys first).
SELECT t.id, t.state, t.unique_key,
       t.unique_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM txqueue_unique_keys AS k
           WHERE k.unique_key = t.unique_key AND k.task_id <> t.id)
FROM txqueue_tasks AS t
WHERE t.id = ANY(%s::uuid[]) AND t.state IN ('failed', 'cancelled') AND t.slot <> -1
  AND NOT EXISTS (SELECT 1 FROM txqueue_waits AS w WHERE w.child = t.id)
  AND NOT EXISTS (SELECT 1 FROM jsonb_each_text(t.parents) AS p (id, on_failure)
                  JOIN txqueue_tasks AS pt ON pt.id = p.id::uuid
                  WHERE p.on_failure <> 'run' AND pt.state <> 'succeeded')
ORDER BY t.id
FOR UPDATE OF t

-- name: take_keys
-- The unique keys of tasks a retry by hand is about to move (retriable found them free),
-- taken back in its transaction: a task whose key an enqueue took meanwhile is left.
INSERT INTO txqueue_unique_keys (unique_key, task_id)
SELECT unique_key, id FROM txqueue_tasks
WHERE id = ANY(%s::uuid[]) AND unique_key IS NOT NULL AND slot <> -1
ON CONFLICT (unique_key) DO NOTHING
RETURNING task_id

-- name: failed_page
-- Pages through failed tasks by id, so tasks that fail again during a long run are not
-- retried twice; locked here, retried (retriable, then apply) in the same transaction. A task whose
-- unique key is taken (`txqueue retry` of its id frees a key its task ended without giving
-- back) is left failed.
SELECT id FROM txqueue_tasks AS f
WHERE state = 'failed' AND queue = coalesce(%(queue)s::text, queue) AND id > %(after)s
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM txqueue_unique_keys AS k WHERE k.unique_key = f.unique_key))
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: stranded
-- Ended steps with an edge left (see release_stranded), each locked: of two cleaners, the
-- second skips it. Through txqueue_waits, which holds only the edges whose parent has not
-- ended: a few rows, each looked up in the tasks by id.
SELECT p.id, p.state, p.step,
       coalesce((p.errors -> -1 ->> 'type') || ': ' || (p.errors -> -1 ->> 'message'),
                p.events -> -1 ->> 'reason')
FROM txqueue_tasks AS p
WHERE p.id = ANY(ARRAY(SELECT DISTINCT parent FROM txqueue_waits))
  AND p.state IN ('succeeded', 'failed', 'cancelled')
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: prune_workflows
-- Workflows whose steps have all been pruned.
DELETE FROM txqueue_workflows AS w
WHERE w.created_at < now() - make_interval(secs => %(age)s)
  AND NOT EXISTS (SELECT 1 FROM txqueue_tasks AS t WHERE t.workflow_id = w.id)

-- name: steps_of
-- The steps of the workflows of the tasks ids, for a retry by hand to re-arm the ones it
-- had blocked: wherever they are kept (the history too), through txqueue_tasks_workflow.
SELECT s.id, s.state, coalesce(s.events -> -1 ->> 'move', s.events -> -1 ->> 'to'),
       s.parents::text, s.workflow_id
FROM txqueue_tasks AS s
WHERE s.workflow_id = ANY(ARRAY(
    SELECT workflow_id FROM txqueue_tasks
    WHERE id = ANY(%(ids)s::uuid[]) AND workflow_id IS NOT NULL))

-- name: rewait
-- Rearmed steps' edges back, (parent, child, OnFailure) each, from the parents that run
-- again: the rearm's side effect, in its transaction (follow.rearming).
INSERT INTO txqueue_waits (parent, child, workflow_id, on_failure)
SELECT e.parent, e.child, t.workflow_id, e.on_failure
FROM unnest(%(parent)s::uuid[], %(child)s::uuid[], %(on_failure)s::text[])
     AS e (parent, child, on_failure)
JOIN txqueue_tasks AS t ON t.id = e.child
ON CONFLICT DO NOTHING

-- name: workflow_flags
-- The newest workflows (at most :cap), each with whether a step has not ended, one failed,
-- and one was cancelled (not skipped), for graph.flow_state; through txqueue_tasks_workflow.
SELECT bool_or(t.state IN ('pending', 'running', 'waiting', 'parked')),
       bool_or(t.state = 'failed'),
       bool_or(t.state = 'cancelled' AND (t.events -> -1 ->> 'move') IS DISTINCT FROM 'skipped')
FROM (SELECT id FROM txqueue_workflows ORDER BY id DESC LIMIT %(cap)s) AS w
JOIN txqueue_tasks AS t ON t.workflow_id = w.id
GROUP BY w.id

-- name: list_workflows
-- A page of workflows, newest first, below the id :before, each read a workflow at a time
-- through txqueue_tasks_workflow: the code of its state (4 if a step has not ended, plus 2
-- if one failed, plus 1 if one was cancelled, not skipped: graph.flow_code_state), when its
-- last step ended, and how many steps are in each state, in core.task.STATES' order.
-- :codes, a JSON array, holds the codes of the states asked for (graph.state_codes).
SELECT w.id::text, w.name, w.created_at, s.code, s.last, s.pending, s.running, s.succeeded,
       s.failed, s.cancelled, s.waiting, s.parked
FROM txqueue_workflows AS w
CROSS JOIN LATERAL (
    SELECT CASE WHEN bool_or(t.state IN ('pending', 'running', 'waiting', 'parked')) THEN 4
                ELSE 0 END
           + CASE WHEN bool_or(t.state = 'failed') THEN 2 ELSE 0 END
           + CASE WHEN bool_or(t.state = 'cancelled'
                               AND (t.events -> -1 ->> 'move') IS DISTINCT FROM 'skipped')
                  THEN 1 ELSE 0 END AS code,
           max(t.finished_at) AS last,
           count(*) FILTER (WHERE t.state = 'pending') AS pending,
           count(*) FILTER (WHERE t.state = 'running') AS running,
           count(*) FILTER (WHERE t.state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE t.state = 'failed') AS failed,
           count(*) FILTER (WHERE t.state = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE t.state = 'waiting') AS waiting,
           count(*) FILTER (WHERE t.state = 'parked') AS parked
    FROM txqueue_tasks AS t
    WHERE t.workflow_id = w.id
) AS s
WHERE w.id < %(before)s
  AND (%(name)s::text IS NULL OR w.name = %(name)s::text)
  AND (%(created_after)s::timestamptz IS NULL OR w.created_at >= %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR w.created_at < %(created_before)s::timestamptz)
  AND (%(codes)s::jsonb IS NULL OR %(codes)s::jsonb @> to_jsonb(s.code))
ORDER BY w.id DESC
LIMIT %(limit)s

-- name: open_steps
-- Locked, for a cancel of the whole workflow: a claim skips them meanwhile, an outcome
-- waits for the cancel's commit.
SELECT id, state FROM txqueue_tasks
WHERE workflow_id = %s AND state IN ('pending', 'running', 'waiting', 'parked') AND slot <> -1
ORDER BY id
FOR UPDATE

-- name: get_workflow
SELECT name, created_at FROM txqueue_workflows WHERE id = %s

-- name: workflow_steps
-- Through txqueue_tasks_workflow, in the order the steps were declared (their ids are
-- UUIDv7s, made in that order). Why one ended without succeeding: its last error, else
-- the reason of its last event (a parent's end, a cancel).
SELECT id, step, name, queue, state, parents::text, attempts, result::text,
       CASE WHEN state IN ('failed', 'cancelled') THEN
           coalesce((errors -> -1 ->> 'type') || ': ' || (errors -> -1 ->> 'message'),
                    events -> -1 ->> 'reason') END,
       coalesce(events -> -1 ->> 'move', events -> -1 ->> 'to'), finished_at
FROM txqueue_tasks WHERE workflow_id = %s ORDER BY id

-- name: lock_task
SELECT state FROM txqueue_tasks WHERE id = %s FOR UPDATE

-- part: task_info_columns
-- A task as TaskInfo holds it, in its fields' order: what task_info (postgres/manage.py) reads.
       id::text, queue, name, payload::text, state, priority, run_at, start_time,
       expires_at, finished_at, attempts, max_attempts, timeout, unique_key, worker_id,
       result::text, errors::text, created_at, updated_at, cancel_requested,
       progress::text,
       coalesce(start_by, run_at + make_interval(secs => expires_in)), time_limit, events::text,
       workflow_id::text, steps::text

-- name: get_task
SELECT
-- with part: task_info_columns
FROM txqueue_tasks WHERE id = %s

-- name: list_tasks
SELECT
-- with part: task_info_columns
FROM txqueue_tasks
WHERE state = coalesce(%(state)s::text, state)
  AND queue = coalesce(%(queue)s::text, queue)
  AND name = coalesce(%(name)s::text, name)
ORDER BY txqueue_tasks.id DESC  -- the column: "id" alone is the text the list gives
LIMIT %(limit)s

-- part: task_filter
-- A TaskFilter (txqueue/filters.py): each condition holds where its parameter is NULL. An
-- error's type matches whole or after its module (`TimeoutError`, `builtins.TimeoutError`);
-- failed_with, a dotted name whole only, as dead letters are grouped.
  AND (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(created_after)s::timestamptz IS NULL OR created_at >= %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL
       OR finished_at >= %(finished_after)s::timestamptz)
  AND (%(finished_before)s::timestamptz IS NULL
       OR finished_at < %(finished_before)s::timestamptz)
  AND (%(workflow)s::uuid IS NULL OR workflow_id = %(workflow)s::uuid)
  AND (%(payload)s::jsonb IS NULL OR payload @> %(payload)s::jsonb)
  AND (%(failed_with)s::text IS NULL OR errors -> -1 ->> 'type' = %(failed_with)s::text
       OR (strpos(%(failed_with)s::text, '.') = 0
           AND right(errors -> -1 ->> 'type', length(%(failed_with)s::text) + 1)
               = '.' || %(failed_with)s::text))
  AND (%(error)s::text IS NULL OR EXISTS (
        SELECT 1 FROM jsonb_array_elements(errors) AS e
        WHERE e.value ->> 'type' = %(error)s::text
           OR right(e.value ->> 'type', length(%(error)s::text) + 1) = '.' || %(error)s::text
           OR strpos(lower(e.value ->> 'message'), lower(%(error)s::text)) > 0))

-- name: find_tasks
-- A page of a search, newest first, below the id :before.
SELECT
-- with part: task_info_columns
FROM txqueue_tasks
WHERE id < %(before)s
-- with part: task_filter
ORDER BY txqueue_tasks.id DESC  -- the column: "id" alone is the text the list gives
LIMIT %(limit)s

-- name: count_tasks
SELECT count(*) FROM (
    SELECT 1 FROM txqueue_tasks
    WHERE true
-- with part: task_filter
    LIMIT %(cap)s
) AS matching

-- name: pick_tasks
-- A bulk operation's next batch, in id order above :after, locked for its transaction.
-- Rows a claim or an outcome holds are skipped rather than waited for (waiting on an
-- outcome that locks several rows could deadlock with it); a cancel's next pass takes
-- them. A running task already asked to stop is not taken again, nor a task made after
-- the operation began (:upto); for a retry, nor a task whose unique key another holds.
SELECT id, state, step IS NOT NULL, unique_key
FROM txqueue_tasks
WHERE id > %(after)s AND id < %(upto)s AND NOT (state = 'running' AND cancel_requested)
  AND (NOT %(retrying)s::boolean OR unique_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM txqueue_unique_keys AS k
        WHERE k.unique_key = txqueue_tasks.unique_key AND k.task_id <> txqueue_tasks.id))
-- with part: task_filter
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: dead_letters
-- The failed tasks grouped by name and the type of the error they failed with last.
SELECT name, coalesce(errors -> -1 ->> 'type', '') AS error, count(*)::int,
       min(coalesce(finished_at, updated_at)), max(coalesce(finished_at, updated_at)),
       (array_agg(errors -> -1 ->> 'message' ORDER BY finished_at DESC, id DESC))[1]
FROM txqueue_tasks
WHERE state = 'failed' AND errors <> '[]'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY 1, 2
ORDER BY 3 DESC, 1, 2
LIMIT %(limit)s

-- name: delete_tasks
-- Finished tasks, gone for good (as the cleaner's prune makes them).
DELETE FROM txqueue_tasks
WHERE id = ANY(%(ids)s) AND state IN ('succeeded', 'failed', 'cancelled')

-- name: history
-- Events of the tasks kept, newest first, each claim's among them: read from the change
-- that followed it (`started`, `worker`: task.timeline), or from the row while the attempt
-- runs. Every event of a task is at or before its updated_at, which leaves out the tasks
-- that changed before :since without opening them.
WITH t AS (
    SELECT id, name, queue, state, attempts, start_time, worker_id, events
    FROM txqueue_tasks
    WHERE name = coalesce(%(name)s::text, name)
      AND queue = coalesce(%(queue)s::text, queue)
      AND updated_at >= coalesce(%(since)s::timestamptz, '-infinity')
), stored AS (
    SELECT t.id, t.name, t.queue, e.value AS ev
    FROM t CROSS JOIN LATERAL jsonb_array_elements(t.events) AS e
), claims AS (
    SELECT DISTINCT ON (id, ev -> 'attempt', ev -> 'started')
           id, name, queue,
           jsonb_build_object('at', ev -> 'started', 'attempt', ev -> 'attempt',
                              'move', 'claimed', 'from', 'pending', 'to', 'running',
                              'by', ev -> 'worker') AS ev
    FROM stored WHERE ev ? 'started'
    UNION ALL
    SELECT t.id, t.name, t.queue,
           jsonb_build_object('at', extract(epoch FROM t.start_time), 'attempt', t.attempts,
                              'move', 'claimed',
                              'from', 'pending', 'to', 'running', 'by', t.worker_id)
    FROM t
    WHERE t.state = 'running' AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(t.events) AS e
        WHERE (e.value ->> 'attempt')::int = t.attempts
          AND (e.value ->> 'started')::numeric = extract(epoch FROM t.start_time))
), every_event AS (
    SELECT id, name, queue, ev FROM stored
    UNION ALL
    SELECT id, name, queue, ev FROM claims
)
SELECT id, name, queue, ev::text
FROM every_event
WHERE ev ->> 'to' = coalesce(%(state)s::text, ev ->> 'to')
  AND (%(by)s::text IS NULL
       OR CASE WHEN ev ? 'by' THEN ev ->> 'by' ELSE ev ->> 'worker' END = %(by)s::text)
  AND (ev ->> 'at')::numeric >= extract(epoch FROM coalesce(%(since)s::timestamptz, '-infinity'))
  AND (ev ->> 'at')::numeric < extract(epoch FROM coalesce(%(until)s::timestamptz, 'infinity'))
ORDER BY (ev ->> 'at')::numeric DESC, id DESC
LIMIT %(limit)s

-- name: delete_queue
WITH deleted AS (
    DELETE FROM txqueue_tasks WHERE queue = %s RETURNING id, unique_key
), unkeyed AS (
    DELETE FROM txqueue_unique_keys AS k USING deleted AS d
    WHERE k.unique_key = d.unique_key AND k.task_id = d.id
)
SELECT count(*) FROM deleted

-- name: status
SELECT queue, state, count(*)::int,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending'
                                                     AND run_at <= now()))::float8
FROM txqueue_tasks
GROUP BY queue, state
ORDER BY queue, state



-- ===== queues ============================================================
-- name: change_queue
-- One statement, in the caller's transaction: the settings named in :set change, the
-- others stay, so that two changes made at once both land. A queue set back to no
-- settings keeps its row (txqueue_room reads it as free, and takes no lock for it).
INSERT INTO txqueue_queues AS q (queue, paused, rate_limit, rate_period, concurrency,
                                 fair_share)
VALUES (%(queue)s, coalesce(%(paused)s, false), %(rate_limit)s, %(rate_period)s,
        %(concurrency)s, coalesce(%(fair_share)s, false))
ON CONFLICT (queue) DO UPDATE
SET paused = CASE WHEN 'paused' = ANY(%(set)s) THEN excluded.paused ELSE q.paused END,
    rate_limit = CASE WHEN 'rate' = ANY(%(set)s) THEN excluded.rate_limit ELSE q.rate_limit END,
    rate_period = CASE WHEN 'rate' = ANY(%(set)s) THEN excluded.rate_period
                       ELSE q.rate_period END,
    concurrency = CASE WHEN 'concurrency' = ANY(%(set)s) THEN excluded.concurrency
                       ELSE q.concurrency END,
    fair_share = CASE WHEN 'fair_share' = ANY(%(set)s) THEN excluded.fair_share
                      ELSE q.fair_share END,
    updated_at = now()
RETURNING queue, paused, rate_limit, rate_period, concurrency, fair_share

-- name: queue_settings
-- The queues paused, limited or shared fairly: a row set back to no settings stays, and is
-- left out.
SELECT queue, paused, rate_limit, rate_period, concurrency, fair_share FROM txqueue_queues
WHERE paused OR rate_limit IS NOT NULL OR concurrency IS NOT NULL OR fair_share
ORDER BY queue

-- name: ripe_tasks
-- A resumed queue's first tasks, to wake workers with; the poll finds the rest. Their
-- wake-ups name the transaction that resumed the queue, if it is still open, so that a
-- worker they reach before its commit waits for it rather than finding the queue paused.
SELECT id::text, queue, pg_current_xact_id_if_assigned()::text FROM txqueue_tasks
WHERE state = 'pending' AND queue = %(queue)s AND run_at <= now() AND slot <> -1
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s

-- ===== waiting ===========================================================
-- name: listen_finished
LISTEN txqueue_finished

-- name: notify_finished
SELECT pg_notify('txqueue_finished', %s)


-- ===== presence ==========================================================
-- name: worker_seen
INSERT INTO txqueue_workers (worker_id, queues, names) VALUES (%s, %s::jsonb, %s::jsonb)
ON CONFLICT (worker_id) DO UPDATE
SET queues = excluded.queues, names = excluded.names, seen_at = now()

-- name: forget_workers
DELETE FROM txqueue_workers WHERE seen_at < now() - make_interval(secs => %s)

-- name: worker_gone
DELETE FROM txqueue_workers WHERE worker_id = %s

-- name: live_workers
SELECT count(*)::int FROM txqueue_workers WHERE seen_at > now() - make_interval(secs => %s)

-- name: unhandled
SELECT t.queue, t.name, count(*)::int
FROM txqueue_tasks t
WHERE t.state = 'pending' AND NOT EXISTS (
    SELECT 1 FROM txqueue_workers w
    WHERE w.seen_at > now() - make_interval(secs => %s)
      AND w.queues ? t.queue AND w.names ? t.name)
GROUP BY t.queue, t.name
ORDER BY t.queue, t.name

-- name: handled
-- Each task name the live workers have a handler for, and the queues they serve it on.
SELECT n.name, jsonb_agg(DISTINCT q.queue)::text
FROM txqueue_workers w
CROSS JOIN jsonb_array_elements_text(w.names) AS n(name)
CROSS JOIN jsonb_array_elements_text(w.queues) AS q(queue)
WHERE w.seen_at > now() - make_interval(secs => %s)
GROUP BY n.name


-- ===== leaders ===========================================================
-- name: lead
-- Taken if free, lapsed or already ours; otherwise the row as the statement found it. The
-- server's clock alone decides, so hosts whose clocks disagree still agree on the holder.
WITH taken AS (
    INSERT INTO txqueue_leaders AS l (role, holder, expires_at)
    VALUES (%(role)s, %(holder)s, now() + make_interval(secs => %(seconds)s))
    ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE l.holder = excluded.holder OR l.expires_at <= now()
    RETURNING holder, expires_at
)
SELECT holder, extract(epoch FROM expires_at - now())::float8 FROM taken
UNION ALL
SELECT holder, extract(epoch FROM expires_at - now())::float8 FROM txqueue_leaders
WHERE role = %(role)s AND NOT EXISTS (SELECT 1 FROM taken)

-- name: resign
DELETE FROM txqueue_leaders WHERE role = %s AND holder = %s


-- ===== schedules =========================================================
-- name: now
SELECT now()

-- name: keep_schedule
-- A changed expression or time zone starts at its own latest slot: without that, the new
-- expression's last slot before now would count as missed and run at once. A schedule made
-- at run time under the same name stays as it is: the worker keeps that one and says so.
INSERT INTO txqueue_schedules AS s (name, task, queue, cron, timezone, last_slot, payload,
                                    catch_up)
VALUES (%(name)s, %(task)s, %(queue)s, %(cron)s, %(timezone)s, %(last_slot)s,
        %(payload)s::jsonb, %(catch_up)s)
ON CONFLICT (name) DO UPDATE
SET task = excluded.task, queue = excluded.queue, cron = excluded.cron,
    timezone = excluded.timezone, payload = excluded.payload, catch_up = excluded.catch_up,
    updated_at = now(),
    last_slot = CASE WHEN (s.cron, s.timezone) = (excluded.cron, excluded.timezone)
                     THEN s.last_slot ELSE greatest(s.last_slot, excluded.last_slot) END
WHERE s.source = 'code'

-- part: schedule_columns
-- The payload as text, parsed by the store: a connection's own jsonb loader (Django sets
-- one that gives text) never decides what it reads as.
name, task, queue, cron, timezone, last_slot, payload::text, catch_up, paused, source

-- name: schedules_of
-- Those of the worker's queues, and those it declares in code wherever another version of
-- it moved them. The clock is joined to the rows so that no schedule still gives one row,
-- the time alone.
SELECT clock.now,
-- with part: schedule_columns
FROM (SELECT now()) AS clock (now)
LEFT JOIN txqueue_schedules ON queue = ANY(%(queues)s) OR name = ANY(%(names)s)
ORDER BY name

-- name: schedules_taken
-- Of the names a worker declares in code, those a schedule made at run time holds.
SELECT name FROM txqueue_schedules WHERE name = ANY(%s) AND source = 'runtime'

-- name: advance_schedule
-- Compared with the last slot the worker read, so its slots are exactly those after it:
-- of two workers firing from the same reading, the second finds the row moved (after
-- waiting for the first one's row lock) and enqueues nothing. Nor does one firing from a
-- reading taken before a pause committed.
UPDATE txqueue_schedules SET last_slot = %(slot)s, updated_at = now()
WHERE name = %(name)s AND last_slot = %(seen)s AND NOT paused

-- name: list_schedules
SELECT
-- with part: schedule_columns
FROM txqueue_schedules ORDER BY name

-- name: get_schedule
SELECT
-- with part: schedule_columns
FROM txqueue_schedules WHERE name = %s

-- name: get_schedule_locked
-- Read to be changed in the caller's transaction: a worker firing meanwhile waits for it,
-- then finds the row moved or paused.
SELECT
-- with part: schedule_columns
FROM txqueue_schedules WHERE name = %s FOR UPDATE

-- name: add_schedule
INSERT INTO txqueue_schedules (name, task, queue, cron, timezone, last_slot, payload,
                               catch_up, paused, source)
VALUES (%(name)s, %(task)s, %(queue)s, %(cron)s, %(timezone)s, %(last_slot)s,
        %(payload)s::jsonb, %(catch_up)s, %(paused)s, %(source)s)
ON CONFLICT (name) DO NOTHING

-- name: write_schedule
-- Compared with the whole row as read: a slot a worker enqueued between the read and this
-- write is never set back to be enqueued again, and a pause or change committed meanwhile
-- (by another operator, or a worker writing its code's definition) is never undone.
UPDATE txqueue_schedules
SET task = %(task)s, queue = %(queue)s, cron = %(cron)s, timezone = %(timezone)s,
    last_slot = %(last_slot)s, payload = %(payload)s::jsonb, catch_up = %(catch_up)s,
    paused = %(paused)s, updated_at = now()
WHERE name = %(name)s
  AND (task, queue, cron, timezone, last_slot, catch_up, paused)
      = (%(seen_task)s, %(seen_queue)s, %(seen_cron)s, %(seen_timezone)s,
         %(seen_last_slot)s, %(seen_catch_up)s, %(seen_paused)s)
  AND payload IS NOT DISTINCT FROM %(seen_payload)s::jsonb

-- name: delete_schedule
DELETE FROM txqueue_schedules WHERE name = %s


-- ===== dashboard =========================================================
-- name: queue_counts
-- Pending through the ripe index (queue and run_at are in it), running through the lease
-- index, parked through its own, and the newest finished of each state through the
-- finished index.
SELECT queue, 'pending', count(*)::int, count(*) FILTER (WHERE run_at <= now())::int,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
FROM (SELECT queue, run_at FROM txqueue_tasks WHERE state = 'pending' LIMIT %(cap)s) AS p
GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*)::int, 0, NULL
FROM (SELECT queue FROM txqueue_tasks WHERE state = 'running' LIMIT %(cap)s) AS r
GROUP BY queue
UNION ALL
SELECT queue, 'parked', count(*)::int, 0, NULL
FROM (SELECT queue FROM txqueue_tasks WHERE state = 'parked' AND slot = -3 LIMIT %(cap)s) AS k
GROUP BY queue
UNION ALL
SELECT f.queue, s.state, count(*)::int, 0, NULL
FROM (VALUES ('succeeded'), ('failed'), ('cancelled')) AS s (state)
CROSS JOIN LATERAL (
    SELECT queue FROM txqueue_tasks
    WHERE state = s.state AND finished_at IS NOT NULL
    ORDER BY finished_at DESC
    LIMIT %(cap)s
) AS f
GROUP BY f.queue, s.state

-- name: finished_per_minute
SELECT s.state, floor(extract(epoch FROM now() - f.finished_at) / 60)::int, count(*)::int
FROM (VALUES ('succeeded'), ('failed')) AS s (state)
CROSS JOIN LATERAL (
    SELECT finished_at FROM txqueue_tasks
    WHERE state = s.state AND finished_at > now() - interval '1 hour'
    ORDER BY finished_at DESC
    LIMIT %(cap)s
) AS f
GROUP BY 1, 2

-- name: failing_names
SELECT name, count(*)::int
FROM (
    SELECT name FROM txqueue_tasks
    WHERE state = 'failed' AND finished_at > now() - interval '1 day'
    ORDER BY finished_at DESC
    LIMIT %(cap)s
) AS f
GROUP BY name
ORDER BY 2 DESC, 1
LIMIT %(limit)s

-- name: browse
-- A page walks the primary key down from ``before`` through at most ``window`` tasks and
-- keeps those matching the filters: a filter that matches few tasks gives a short page,
-- never a scan of the whole table.
SELECT
-- with part: task_info_columns
FROM (
    SELECT * FROM txqueue_tasks WHERE id < %(before)s ORDER BY id DESC LIMIT %(window)s
) AS w
WHERE state = coalesce(%(state)s::text, state)
  AND queue = coalesce(%(queue)s::text, queue)
  AND name = coalesce(%(name)s::text, name)
ORDER BY w.id DESC
LIMIT %(limit)s

-- name: window_end
SELECT id FROM txqueue_tasks WHERE id < %(before)s ORDER BY id DESC
OFFSET %(window)s - 1 LIMIT 1

-- name: running_tasks
SELECT
-- with part: task_info_columns
FROM txqueue_tasks WHERE state = 'running'
ORDER BY expires_at LIMIT %(limit)s

-- name: workers
SELECT worker_id, queues::text, started_at, seen_at FROM txqueue_workers
WHERE seen_at > now() - make_interval(secs => %s)
ORDER BY worker_id LIMIT 1000


-- ===== slots =============================================================
-- The rotation of the slots tasks are written to, and the reclaim of the others
-- (docs/explanation/storage.md). One process at a time does it, whoever takes this lock first.
-- name: slots_turn
SELECT pg_try_advisory_xact_lock(hashtext('txqueue_slots'))

-- name: upkeep_idle_limit
-- A process stopped inside the upkeep's transaction (frozen, cut off) would keep a slot's
-- ACCESS EXCLUSIVE lock, and with it every claim and recovery waiting, until its session
-- ended: hours, for a session the server cannot tell is gone. The server ends it after
-- 2 s idle in this transaction instead (the statements here take milliseconds).
SELECT set_config('idle_in_transaction_session_timeout', '2000', true)

-- name: current_slot
SELECT s.slot, extract(epoch FROM now() - s.since)::float8
FROM txqueue_slots AS s WHERE s.slot = txqueue_current_slot()

-- name: slot_sizes
-- Pages on disk: a truncated slot that nothing was written to since has none.
SELECT s.slot, pg_relation_size(s.relname::regclass)
FROM (VALUES (-2, 'txqueue_tasks_legacy'), (0, 'txqueue_tasks_s0'), (1, 'txqueue_tasks_s1'),
             (2, 'txqueue_tasks_s2'), (3, 'txqueue_tasks_s3')) AS s (slot, relname)
ORDER BY s.slot

-- name: move_finished
-- Finished tasks of a slot to the history, a batch at a time. Nothing else changes them
-- but a retry, which moves them itself (and meets this one's row locks).
UPDATE txqueue_tasks SET slot = -1
WHERE slot = %(slot)s AND id = ANY(ARRAY(
    SELECT id FROM txqueue_tasks
    WHERE slot = %(slot)s AND state IN ('succeeded', 'failed', 'cancelled')
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))

-- name: move_pending
-- Pending tasks of a slot none of whose tasks runs any more (delayed ones, retries waiting
-- out a backoff, a backlog) to the current slot, a batch at a time.
UPDATE txqueue_tasks SET slot = txqueue_current_slot()
WHERE slot = %(slot)s AND id = ANY(ARRAY(
    SELECT id FROM txqueue_tasks
    WHERE slot = %(slot)s AND state = 'pending'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))

-- name: slot_holds
-- Whether the slot holds a running task, and whether it holds any task at all.
SELECT EXISTS (SELECT 1 FROM txqueue_tasks WHERE slot = %(slot)s AND state = 'running'),
       EXISTS (SELECT 1 FROM txqueue_tasks WHERE slot = %(slot)s)

-- name: lock_timeout
-- A few milliseconds at most: a waiting ACCESS EXCLUSIVE queues every claim behind it.
SELECT set_config('lock_timeout', '10ms', true)

-- name: lock_slot
LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE

-- name: truncate_slot
TRUNCATE {table}

-- name: rotate
WITH clock AS (UPDATE txqueue_slots SET since = now() WHERE slot = %(slot)s)
SELECT setval('txqueue_slot', %(slot)s)


-- ===== vacuum horizon ====================================================
-- name: vacuum_horizon
-- What keeps vacuum from removing dead row versions here, oldest xmin first: a session's
-- transaction (its xid) or snapshot (its xmin); a walsender's, which carries a standby's
-- hot_standby_feedback and holds every database; a replication slot's xmin, which holds
-- every database too; a prepared transaction. Sessions and prepared transactions of other
-- databases do not hold this one's tables, and a logical slot's catalog_xmin holds only
-- the system catalogs: neither is a candidate. Nor is an autovacuum worker, whose xmin
-- other vacuums ignore, nor an xmin no transaction has passed yet (age 0), which holds
-- nothing back.
-- Without pg_read_all_stats (pg_monitor), a role sees other users' sessions with their
-- pid, user, application and xids but no state, times, address or backend type: those
-- come back NULL, and a physical walsender shows only as a session of no database.
-- Among equal xmins (a transaction's xid is every later snapshot's xmin) the transaction
-- whose own xid it is comes first, then the one that began first.
WITH holders AS (
    SELECT 'backend' AS kind, a.backend_xid AS xid, a.backend_xmin AS snapshot,
           a.xact_start AS since, a.pid, a.application_name AS application,
           a.usename::text AS username, host(a.client_addr) AS client, a.state,
           a.backend_type, NULL::text AS name, NULL::boolean AS active
    FROM pg_stat_activity AS a
    WHERE (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
      AND a.pid <> pg_backend_pid()
      AND (a.datname = current_database() OR a.datname IS NULL
           OR a.backend_type = 'walsender')
      AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
    UNION ALL
    SELECT 'slot', NULL, s.xmin, NULL, s.active_pid, NULL, NULL, NULL, NULL, NULL,
           s.slot_name::text, s.active
    FROM pg_replication_slots AS s
    WHERE s.xmin IS NOT NULL
    UNION ALL
    SELECT 'prepared', p.transaction, NULL, p.prepared, NULL, NULL, p.owner::text, NULL,
           NULL, NULL, p.gid, NULL
    FROM pg_prepared_xacts AS p
    WHERE p.database = current_database()
), held AS (
    SELECT *, CASE WHEN age(xid) >= coalesce(age(snapshot), 0) THEN xid ELSE snapshot END
              AS xmin
    FROM holders
)
SELECT kind, xmin::text, age(xmin), extract(epoch FROM now() - since)::float8, since, pid,
       application, username, client, state, backend_type, name, active
FROM held
WHERE age(xmin) > 0
ORDER BY age(xmin) DESC, xid = xmin DESC NULLS LAST, since NULLS LAST
LIMIT 1

-- name: install_clock
-- Tests only (txqueue.testing.Clock): a now() found before pg_catalog's in the database's
-- search_path, ahead of it by a skew kept in a table, so that every statement saying now()
-- runs on the moved clock in every session opened from here on, with no change of its own.
-- public stays first, where tables made without a schema still go.
CREATE SCHEMA IF NOT EXISTS txqueue_test_clock;
CREATE TABLE IF NOT EXISTS txqueue_test_clock.skew (skew interval NOT NULL);
INSERT INTO txqueue_test_clock.skew
    SELECT '0' WHERE NOT EXISTS (SELECT FROM txqueue_test_clock.skew);
CREATE OR REPLACE FUNCTION txqueue_test_clock.now() RETURNS timestamptz LANGUAGE sql STABLE
    AS $$ SELECT pg_catalog.now() + (SELECT skew FROM txqueue_test_clock.skew) $$;
CREATE OR REPLACE FUNCTION txqueue_test_clock.clock_timestamp() RETURNS timestamptz
    LANGUAGE sql VOLATILE
    AS $$ SELECT pg_catalog.clock_timestamp() + (SELECT skew FROM txqueue_test_clock.skew) $$;
DO $$ BEGIN
    EXECUTE format(
        'ALTER DATABASE %I SET search_path = "$user", public, txqueue_test_clock, pg_catalog',
        current_database()
    );
END $$;

-- name: move_clock
UPDATE txqueue_test_clock.skew SET skew = skew + make_interval(secs => %(seconds)s)

-- name: reset_clock
UPDATE txqueue_test_clock.skew SET skew = '0'


-- ===== the search index (opt-in) =========================================================
-- name: payload_index_parts
-- Each partition of the tasks table, and whether its payload index exists and is valid
-- (an interrupted CREATE INDEX CONCURRENTLY leaves one that is not): the index of that
-- name on that very table, whatever other schemas hold.
SELECT c.relname, i.indisvalid
FROM pg_inherits AS h
JOIN pg_class AS c ON c.oid = h.inhrelid
LEFT JOIN (pg_index AS i JOIN pg_class AS x ON x.oid = i.indexrelid)
       ON i.indrelid = c.oid AND x.relname = c.relname || '_payload'
WHERE h.inhparent = 'txqueue_tasks'::regclass
ORDER BY c.relname

-- name: payload_index_create
CREATE INDEX CONCURRENTLY {index} ON {part} USING gin (payload jsonb_path_ops)

-- name: payload_index_drop_part
DROP INDEX CONCURRENTLY {index}

-- name: payload_index_attach
ALTER INDEX txqueue_tasks_payload ATTACH PARTITION {index}

-- name: payload_index_parent
-- On the parent alone: invalid until each partition's index is attached.
CREATE INDEX IF NOT EXISTS txqueue_tasks_payload ON ONLY txqueue_tasks
USING gin (payload jsonb_path_ops)

-- name: payload_index_drop
-- On a partitioned index DROP cannot be CONCURRENTLY: it locks each partition for as long
-- as dropping its index takes, a moment.
DROP INDEX IF EXISTS txqueue_tasks_payload


-- ===== steps =============================================================
-- name: record_step
-- A step's result, appended to the task's steps by the attempt that ran it while that
-- attempt still holds the task (fenced as an outcome is: a worker that lost the lease
-- records nothing). The row's lock is waited for, not skipped: a heartbeat or a progress
-- write holds it for one statement. The time is the transaction's, as in every write of
-- txqueue's (an atomic step's began before its function ran).
WITH locked AS (
    SELECT id, attempts, worker_id, state FROM txqueue_tasks
    WHERE id = %(id)s AND slot <> -1
    FOR UPDATE
)
UPDATE txqueue_tasks AS t
SET steps = coalesce(t.steps, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'name', %(name)s::text, 'result', %(result)s::jsonb,
        'at', extract(epoch FROM now()), 'took', %(took)s::float8,
        'attempt', x.attempts)),
    updated_at = now()
FROM locked AS x
WHERE t.id = x.id AND t.slot <> -1 AND x.attempts = %(attempt)s
  AND x.worker_id = %(worker_id)s AND x.state = 'running'
RETURNING t.id

-- name: recorded_steps
SELECT steps::text FROM txqueue_tasks WHERE id = %s AND slot <> -1

-- ===== sleeps and waits ==================================================
-- name: due_parked
-- Parked tasks whose time came, or whose signal is kept (sent from SQL, txqueue_signal,
-- which wakes no one itself), for `apply` to wake (Parking.wake_parked); locked, so two
-- processes waking at once wake each once.
SELECT id FROM txqueue_tasks
WHERE id IN ((SELECT id FROM txqueue_tasks
              WHERE state = 'parked' AND slot = -3 AND run_at <= now()
              ORDER BY run_at LIMIT %(limit)s)
             UNION ALL
             (SELECT t.id FROM txqueue_signals AS s
              JOIN txqueue_tasks AS t ON t.wait_key = s.key AND t.state = 'parked' AND t.slot = -3
              LIMIT %(limit)s))
  AND state = 'parked' AND slot = -3
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: lock_signal
-- Before a signal is kept or taken: the statements after it see what the key's last
-- signal or wait committed while this one waited (txqueue_lock_signal).
SELECT txqueue_lock_signal(%(key)s)

-- name: lock_wait
-- Before a wait takes a signal: its own task's row, then the key's lock. A write that ends
-- a child locks the rows of its batch, then the child's key: in that order both ways, the
-- two never wait for each other in a circle.
SELECT txqueue_lock_signal(%(key)s)
FROM (SELECT 1 FROM txqueue_tasks WHERE id = %(id)s AND slot <> -1 FOR UPDATE) AS own

-- name: lock_signals
-- The keys of children's ends, each locked if it can be at once, never waited for: the
-- write that ends a child holds its batch's rows, and a park in another batch holds its
-- key's lock shared till its commit, so a wait here could close a circle. Where a key is
-- held (a park or a take in flight), or a repeatable read snapshot cannot see a park that
-- committed meanwhile, the end is kept all the same and the parked task woken by the next
-- look of a worker or the cleaner (due_parked: a parked task whose signal is kept).
SELECT count(pg_try_advisory_xact_lock(hashtextextended('txqueue.signal:' || k, 0)))
FROM (SELECT k FROM unnest(%(keys)s::text[]) AS k ORDER BY k) AS s

-- name: keep_signal
-- A signal, kept for a wait to take; and the tasks parked on its key, locked, for `apply`
-- to wake (the statement before took the key's lock).
WITH kept AS (
    INSERT INTO txqueue_signals (key, payload) VALUES (%(key)s, %(payload)s::jsonb)
)
SELECT id FROM txqueue_tasks
WHERE state = 'parked' AND slot = -3 AND wait_key = %(key)s
ORDER BY id
FOR UPDATE

-- name: tell_parents
-- The ends of children (%(ids)s, after lock_signals), kept as the signals `task:<id>` their
-- parents' waits take: the state, the result, and why one that did not succeed ended (as a
-- workflow step's outcome says it), in place of an earlier end no wait took (a child
-- retried by hand); and the tasks parked on those keys, locked, for `apply` to wake. One
-- another transaction holds is skipped: it is woken by the next look, if it is still parked.
WITH superseded AS (
    DELETE FROM txqueue_signals WHERE key = ANY(%(keys)s::text[])
), kept AS (
    INSERT INTO txqueue_signals (key, payload)
    SELECT 'task:' || id, jsonb_build_object(
               'state', state, 'result', result,
               'reason', CASE WHEN state <> 'succeeded' THEN
                   coalesce((errors -> -1 ->> 'type') || ': ' || (errors -> -1 ->> 'message'),
                            events -> -1 ->> 'reason') END)
    FROM txqueue_tasks WHERE id = ANY(%(ids)s::uuid[]) AND slot <> -1
)
SELECT id, wait_key FROM txqueue_tasks
WHERE state = 'parked' AND slot = -3 AND wait_key = ANY(%(keys)s::text[])
ORDER BY id
FOR UPDATE SKIP LOCKED

-- name: take_signal
-- The key's oldest signal, taken by a wait in its step's transaction (the statement before
-- took the key's lock).
DELETE FROM txqueue_signals
WHERE id = (SELECT id FROM txqueue_signals WHERE key = %(key)s ORDER BY id LIMIT 1)
RETURNING coalesce(payload, 'null'::jsonb)::text

-- name: prune_signals
-- Signals no wait took within the retention.
DELETE FROM txqueue_signals WHERE sent_at < now() - make_interval(secs => %(age)s)

-- name: database_named
-- Whether the database can hold a name (migration 20 applied): asked first, in a caller's
-- transaction, so that an older schema's missing table does not abort it.
SELECT to_regclass('txqueue_database') IS NOT NULL

-- name: database_name
-- This database's name among several (migration 20); no row: it has none.
SELECT name FROM txqueue_database

-- name: name_database
-- The name `txqueue init` was given, recorded unless the database has one already; returns
-- the one it has now.
WITH given AS (
    INSERT INTO txqueue_database (name) VALUES (%(name)s) ON CONFLICT (one) DO NOTHING
    RETURNING name
)
SELECT coalesce((SELECT name FROM given), (SELECT name FROM txqueue_database))
