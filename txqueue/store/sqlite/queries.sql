-- The SQLite store's statements, each under `-- name:`, read once by `sql.Queries`.
--
-- Times are Unix seconds from the store's clock (this machine's, which tests can move),
-- passed in as :now. Ids are UUID text; lists of ids go in as one JSON array parameter,
-- read back with json_each. Every write of txqueue's own runs in
-- a BEGIN IMMEDIATE transaction; a fenced UPDATE still re-checks (id, attempts, worker_id,
-- state) itself rather than rest on the write lock.


-- connection ---------------------------------------------------------------------------

-- name: journal_mode_wal
-- Readers never wait for the writer, and the writer never waits for readers.
PRAGMA journal_mode = WAL

-- name: synchronous_normal
-- In WAL mode a commit survives a crash of the process; only a power cut can lose the last
-- ones, and the file stays consistent.
PRAGMA synchronous = NORMAL

-- name: begin_immediate
-- The write lock taken first: a deferred transaction that has read cannot always be
-- upgraded to a writer (another wrote meanwhile), and fails instead of waiting.
BEGIN IMMEDIATE

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- name: ping
-- Reads nothing: sent behind another statement on aiosqlite's thread, its answer says
-- that one has run.
SELECT 1

-- name: applied_migrations
SELECT version FROM txqueue_migrations

-- name: record_migration
INSERT INTO txqueue_migrations (version, applied_at) VALUES (?, ?)


-- enqueue ------------------------------------------------------------------------------

-- The task row's columns are not written out here: {task_columns}, {task_values} and a
-- workflow step's {step_columns}, {step_values} are made of their declaration in
-- txqueue/store/columns.py (columns.fragments) and filled in when this file is read; their
-- parameters are numbered (?1, ?2, …), and {task_now} is the one of the store's clock.

-- name: insert_task
-- A live task (pending or running) holding the unique key makes this insert nothing; the
-- caller then looks the holder up with live_by_unique_key.
INSERT INTO txqueue_tasks ({task_columns}, created_at, updated_at)
VALUES ({task_values}, {task_now}, {task_now})
ON CONFLICT (unique_key) WHERE state IN ('pending', 'running', 'parked') DO NOTHING
RETURNING id

-- name: insert_workflow
INSERT INTO txqueue_workflows (id, name, steps, created_at) VALUES (?, ?, ?, ?)

-- name: insert_step
INSERT INTO txqueue_tasks ({step_columns}, created_at, updated_at)
VALUES ({step_values}, {step_now}, {step_now})

-- name: insert_waits
-- As PostgreSQL's: an edge from each parent of each waiting step, from its `parents`.
INSERT INTO txqueue_waits (parent, child, workflow_id, on_failure)
SELECT p.key, t.id, t.workflow_id, p.value
FROM txqueue_tasks AS t, json_each(t.parents) AS p
WHERE t.workflow_id = ? AND t.state = 'waiting'

-- name: live_by_unique_key
SELECT id, name FROM txqueue_tasks
WHERE unique_key = ? AND state IN ('pending', 'running', 'parked')


-- claims -------------------------------------------------------------------------------

-- name: pick_ids
-- Only tasks this worker has a handler for (:defaults is its registry as a JSON object
-- keyed by name); max(created_at, run_at) is when the task became ripe, for the wait.
SELECT id, queue, name, payload, attempts, max_attempts, timeout, max(created_at, run_at),
       trace_context, step IS NOT NULL, time_limit, start_by, run_at, expires_in,
       json_extract(events, '$[#-1].move') IN ('parked', 'woken')
FROM txqueue_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending' AND run_at <= :now
  AND name IN (SELECT key FROM json_each(:defaults))
ORDER BY priority DESC, run_at, id

-- name: pick_ripe
-- As pick_ids, for the idle poll of one queue, through the txqueue_tasks_ripe index; in a
-- fair-share poll, past the ids of :taken (a JSON array), the key turns' tasks.
SELECT id, queue, name, payload, attempts, max_attempts, timeout, max(created_at, run_at),
       trace_context, step IS NOT NULL, time_limit, start_by, run_at, expires_in,
       json_extract(events, '$[#-1].move') IN ('parked', 'woken')
FROM txqueue_tasks
WHERE state = 'pending' AND queue = :queue AND run_at <= :now
  AND name IN (SELECT key FROM json_each(:defaults))
  AND id NOT IN (SELECT value FROM json_each(:taken))
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: pick_key
-- A key's turn in a fair-share poll, through the txqueue_tasks_fair index.
SELECT id, queue, name, payload, attempts, max_attempts, timeout, max(created_at, run_at),
       trace_context, step IS NOT NULL, time_limit, start_by, run_at, expires_in,
       json_extract(events, '$[#-1].move') IN ('parked', 'woken')
FROM txqueue_tasks
WHERE state = 'pending' AND queue = :queue AND concurrency_key = :key AND run_at <= :now
  AND name IN (SELECT key FROM json_each(:defaults))
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: next_keys
-- A fair-share queue's keys after :after, up to :limit of them, a step of the index each.
WITH RECURSIVE ring (k, pos) AS (
    SELECT (SELECT concurrency_key FROM txqueue_tasks
            WHERE state = 'pending' AND queue = :queue AND concurrency_key > :after
            ORDER BY concurrency_key LIMIT 1), 1
    UNION ALL
    SELECT (SELECT concurrency_key FROM txqueue_tasks
            WHERE state = 'pending' AND queue = :queue AND concurrency_key > ring.k
            ORDER BY concurrency_key LIMIT 1), pos + 1
    FROM ring WHERE ring.k IS NOT NULL AND pos < :limit
)
SELECT k FROM ring WHERE k IS NOT NULL

-- name: claim
-- Unfenced: it runs in the BEGIN IMMEDIATE transaction that picked the row as pending.
-- The worker's max_attempts and lease policy are copied into the row for the cleaner,
-- which has no registry; the task's key, where the registry gives it one (else the key
-- written at enqueue stays).
UPDATE txqueue_tasks
SET state = 'running', start_time = ?, attempts = ?, worker_id = ?, expires_at = ?,
    max_attempts = ?, on_lease_expired = ?, concurrency_key = coalesce(?, concurrency_key),
    progress = NULL, updated_at = ?
WHERE id = ?

-- name: rows_by_id
SELECT t.id, t.state, t.run_at, t.name,
       EXISTS (SELECT 1 FROM txqueue_queues AS q
               WHERE q.queue = t.queue
                 AND (q.paused OR q.rate_limit IS NOT NULL OR q.concurrency IS NOT NULL
                      OR q.fair_share))
FROM txqueue_tasks AS t WHERE t.id IN (SELECT value FROM json_each(?))

-- name: room_settings
-- A queue's limits, read in the claim's write transaction (schema.sql's txqueue_room does
-- the same on PostgreSQL, where the claims of a limited queue take turns).
SELECT paused, rate_limit, rate_period, concurrency, fair_share FROM txqueue_queues
WHERE queue = ?

-- name: running_in_queue
SELECT count(*) FROM txqueue_tasks WHERE state = 'running' AND queue = ?

-- name: running_with_key
SELECT count(*) FROM txqueue_tasks WHERE state = 'running' AND concurrency_key = ?

-- name: forget_starts
DELETE FROM txqueue_starts WHERE bucket = :bucket AND at <= :since

-- name: starts_since
-- The window's starts, its first and last, and how many started with the last.
SELECT coalesce(sum(n), 0), min(at), max(at),
       (SELECT sum(n) FROM txqueue_starts
        WHERE bucket = :bucket
          AND at = (SELECT max(at) FROM txqueue_starts WHERE bucket = :bucket))
FROM txqueue_starts WHERE bucket = :bucket AND at > :since

-- name: log_start
INSERT INTO txqueue_starts (bucket, at, until, n) VALUES (?, ?, ?, ?)

-- name: outcome_landed
-- Whether an outcome a retried write found fenced out was written by an earlier try, and
-- the state it left (the PostgreSQL store's outcomes_landed says when).
SELECT CASE WHEN attempts = :attempt THEN state ELSE 'pending' END FROM txqueue_tasks AS t
WHERE id = :id
  AND (EXISTS (SELECT 1 FROM json_each(t.errors) AS e
               WHERE json_extract(e.value, '$.attempt') = :attempt
                 AND json_extract(e.value, '$.worker_id') = :worker_id
                 AND json_extract(e.value, '$.type') <> :lease_expired)
       OR (attempts = :attempt AND worker_id = :worker_id AND state <> 'running'
           AND NOT EXISTS (SELECT 1 FROM json_each(t.errors) AS e
                           WHERE json_extract(e.value, '$.attempt') = :attempt
                             AND json_extract(e.value, '$.type') = :lease_expired)))

-- name: apply
-- A transition (lifecycle.Transition), fenced: :to is written, or :if_cancelled (when
-- set) if the task's cancellation was requested. Its event is appended to the task's
-- history; `state` in SET reads the row as it was, the state the event moves from.
UPDATE txqueue_tasks
SET state = d.next,
    payload = coalesce(:payload, payload),
    result = coalesce(:result, result),
    progress = coalesce(:progress, progress),
    errors = CASE WHEN :error IS NULL THEN errors
                  ELSE json_insert(errors, '$[#]', json(:error)) END,
    -- As PostgreSQL's: a step readied is due from now, or when its own delay ends; a task
    -- parked, when it wakes, or now if its signal had come.
    run_at = CASE WHEN :to = 'parked' AND d.next = 'pending' THEN :now
                  WHEN d.next IN ('pending', 'parked') AND :run_in IS NOT NULL
                  THEN :now + :run_in
                  WHEN state = 'waiting' THEN max(run_at, :now) ELSE run_at END,
    finished_at = CASE WHEN d.next IN (SELECT value FROM json_each(:finished)) THEN :now END,
    expires_at = CASE WHEN d.next <> 'running' THEN NULL
                      WHEN :lease_ends THEN :now ELSE expires_at END,
    attempts = attempts - :undoes_claim,
    -- As PostgreSQL's: out of a finished state (a retry by hand), the cancel request
    -- cleared, an attempt more if none was left, its wake-up to be sent again.
    max_attempts = CASE WHEN state IN ('failed', 'cancelled') AND d.next = 'pending'
                            AND max_attempts IS NOT NULL
                        THEN max(max_attempts, attempts + 1)
                        WHEN :to = 'parked' AND d.next <> 'cancelled'
                        THEN max_attempts + 1 ELSE max_attempts END,
    notified_at = CASE WHEN state IN ('failed', 'cancelled') THEN NULL ELSE notified_at END,
    start_time = CASE WHEN :undoes_claim AND attempts = 1 THEN NULL ELSE start_time END,
    worker_id = CASE WHEN :undoes_claim THEN NULL ELSE worker_id END,
    cancel_requested = CASE WHEN state IN ('failed', 'cancelled') THEN 0
                            ELSE cancel_requested OR :requests_cancel END,
    -- As PostgreSQL's: a change of a running task carries its attempt's claim, and an
    -- entry leaves out what the rest says (json_patch into {} drops the nulls).
    events = json_insert(events, '$[#]', json_insert(json_patch('{}', json_object(
        'at', :now, 'attempt', attempts, 'move', nullif(:move, d.next),
        'from', nullif(state, 'running'), 'to', d.next,
        'by', CASE WHEN state <> 'running' OR :by IS NOT worker_id THEN :by END,
        'reason', :reason,
        'started', CASE WHEN state = 'running' THEN start_time END,
        'worker', CASE WHEN state = 'running' THEN worker_id END)),
        -- A running task's change by no one: by null (json_insert leaves $.to as it is).
        CASE WHEN state = 'running' AND :by IS NULL THEN '$.by' ELSE '$.to' END, NULL)),
    wait_key = CASE WHEN d.next = 'parked' THEN :wait_key END,
    updated_at = :now
FROM (SELECT id, CASE WHEN cancel_requested AND :if_cancelled IS NOT NULL THEN :if_cancelled
                      WHEN :to = 'parked' AND EXISTS (SELECT 1 FROM txqueue_signals
                                                      WHERE key = :wait_key) THEN 'pending'
                      ELSE :to END AS next
      FROM txqueue_tasks WHERE id = :id) AS d
WHERE txqueue_tasks.id = d.id AND state = :from
  AND (:attempt IS NULL OR attempts = :attempt)
  AND (:worker_id IS NULL OR worker_id = :worker_id)
RETURNING state, step,
          CASE WHEN state = 'pending' AND (:from IN ('waiting', 'parked', 'failed', 'cancelled')
                                           OR :to = 'parked')
               THEN queue END,
          -- A child this ended: its parent is signalled (store/follow.py). Not `IS NOT
          -- NULL`: in this UPDATE's RETURNING, on txqueue's table, SQLite 3.40.1 answered
          -- true for `parent_id IS NOT NULL` (and `step`, `wait_key`) of a NULL column.
          typeof(parent_id) <> 'null' AND state IN (SELECT value FROM json_each(:finished))

-- name: payload
SELECT payload FROM txqueue_tasks WHERE id = ?

-- name: free_waits
-- The edges from steps that just ended (a JSON array of ids), deleted.
DELETE FROM txqueue_waits WHERE parent IN (SELECT value FROM json_each(?))
RETURNING child, parent, on_failure

-- name: children
SELECT c.id, c.state, EXISTS (SELECT 1 FROM txqueue_waits AS w WHERE w.child = c.id), c.inputs
FROM txqueue_tasks AS c WHERE c.id IN (SELECT value FROM json_each(?))

-- name: step_results
-- As PostgreSQL's: the state, the result, and why one that did not succeed ended.
SELECT id, state, result,
       coalesce(json_extract(errors, '$[#-1].type') || ': ' || json_extract(errors, '$[#-1].message'),
                json_extract(events, '$[#-1].reason'))
FROM txqueue_tasks WHERE id IN (SELECT value FROM json_each(?))

-- name: extend_lease
UPDATE txqueue_tasks SET expires_at = ?, updated_at = ?
WHERE id = ? AND attempts = ? AND worker_id = ? AND state = 'running'
RETURNING id

-- name: write_progress
UPDATE txqueue_tasks SET progress = ?
WHERE id = ? AND attempts = ? AND worker_id = ? AND state = 'running'
RETURNING id

-- name: lock_running
-- A task the stopping worker holds, for lifecycle to decide its release on (the write
-- lock, taken at BEGIN IMMEDIATE, keeps it as read).
SELECT id, queue, name, payload, attempts, coalesce(max_attempts, :default_max_attempts),
       worker_id, on_lease_expired, cancel_requested
FROM txqueue_tasks
WHERE id = :id AND attempts = :attempt AND worker_id = :worker_id AND state = 'running'

-- name: cancel_requested
SELECT id FROM txqueue_tasks
WHERE id IN (SELECT value FROM json_each(?)) AND worker_id = ? AND state = 'running'
  AND cancel_requested


-- upkeep -------------------------------------------------------------------------------

-- name: stale_queues
-- Ripe for longer than the grace and not re-notified within it: its wake-up may be lost.
SELECT DISTINCT queue FROM txqueue_tasks
WHERE state = 'pending' AND run_at <= :before
  AND (notified_at IS NULL OR notified_at <= :before)

-- name: renotify
-- The stale tasks of stale_queues, marked so the next run within the grace skips them.
UPDATE txqueue_tasks SET notified_at = :now
WHERE id IN (
    SELECT id FROM txqueue_tasks
    WHERE state = 'pending' AND run_at <= :before
      AND (notified_at IS NULL OR notified_at <= :before)
      AND queue IN (SELECT value FROM json_each(:queues))
    LIMIT :limit
)
RETURNING id, queue

-- name: any_expired
-- Read before a recovery takes the write lock: every worker looks every 2 s, and would
-- otherwise make every other writer of an idle database wait for nothing.
SELECT 1 FROM txqueue_tasks WHERE state = 'running' AND expires_at < :now LIMIT 1

-- name: lock_expired
SELECT id, queue, name, payload, attempts, coalesce(max_attempts, :default_max_attempts),
       worker_id, on_lease_expired, cancel_requested
FROM txqueue_tasks
WHERE state = 'running' AND expires_at < :now
ORDER BY expires_at
LIMIT :limit

-- name: prune
-- A bounded batch, so the write lock is held briefly; a workflow's steps stay until every
-- one of them is old enough (as PostgreSQL's).
DELETE FROM txqueue_tasks WHERE id IN (
    SELECT id FROM txqueue_tasks AS t
    WHERE state = :state AND finished_at < :before
      AND (workflow_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM txqueue_tasks AS o
          WHERE o.workflow_id = t.workflow_id
            AND (o.finished_at IS NULL OR o.finished_at >= :before)))
    LIMIT :limit
)

-- name: prune_starts
DELETE FROM txqueue_starts WHERE until < :now


-- manage -------------------------------------------------------------------------------

-- name: retriable
-- As PostgreSQL's: the tasks a retry by hand may move (the write lock is the caller's),
-- each with its unique key, and whether a live task holds it.
SELECT t.id, t.state, t.unique_key,
       t.unique_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM txqueue_tasks AS live
           WHERE live.unique_key = t.unique_key AND live.id <> t.id
             AND live.state IN ('pending', 'running', 'parked'))
FROM txqueue_tasks AS t
WHERE t.id IN (SELECT value FROM json_each(:ids)) AND t.state IN ('failed', 'cancelled')
  AND NOT EXISTS (SELECT 1 FROM txqueue_waits AS w WHERE w.child = t.id)
  AND NOT EXISTS (SELECT 1 FROM json_each(t.parents) AS p
                  JOIN txqueue_tasks AS pt ON pt.id = p.key
                  WHERE p.value <> 'run' AND pt.state <> 'succeeded')
ORDER BY t.id

-- name: failed_page
-- Failed tasks by id, but those whose unique key a live task holds now: retrying one
-- would break the key's uniqueness.
SELECT id FROM txqueue_tasks AS f
WHERE state = 'failed' AND queue = coalesce(:queue, queue) AND id > :after
  AND (unique_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM txqueue_tasks AS live
      WHERE live.unique_key = f.unique_key AND live.state IN ('pending', 'running', 'parked')))
ORDER BY id
LIMIT :limit

-- name: stranded
SELECT p.id, p.state, p.step,
       coalesce(json_extract(p.errors, '$[#-1].type') || ': '
                || json_extract(p.errors, '$[#-1].message'),
                json_extract(p.events, '$[#-1].reason'))
FROM txqueue_tasks AS p
WHERE p.id IN (SELECT parent FROM txqueue_waits)
  AND p.state IN ('succeeded', 'failed', 'cancelled')
LIMIT :limit

-- name: prune_workflows
DELETE FROM txqueue_workflows
WHERE created_at < :before
  AND NOT EXISTS (SELECT 1 FROM txqueue_tasks AS t WHERE t.workflow_id = txqueue_workflows.id)

-- name: steps_of
SELECT s.id, s.state,
       coalesce(json_extract(s.events, '$[#-1].move'), json_extract(s.events, '$[#-1].to')),
       s.parents, s.workflow_id
FROM txqueue_tasks AS s
WHERE s.workflow_id IN (
    SELECT workflow_id FROM txqueue_tasks
    WHERE id IN (SELECT value FROM json_each(:ids)) AND workflow_id IS NOT NULL)

-- name: rewait
-- As PostgreSQL's, one edge.
INSERT INTO txqueue_waits (parent, child, workflow_id, on_failure)
SELECT ?, id, workflow_id, ? FROM txqueue_tasks WHERE id = ?
ON CONFLICT DO NOTHING

-- name: workflow_flags
SELECT max(t.state IN ('pending', 'running', 'waiting', 'parked')),
       max(t.state = 'failed'),
       max(t.state = 'cancelled' AND coalesce(json_extract(t.events, '$[#-1].move'), '')
                                     <> 'skipped')
FROM (SELECT id FROM txqueue_workflows ORDER BY id DESC LIMIT :cap) AS w
JOIN txqueue_tasks AS t ON t.workflow_id = w.id
GROUP BY w.id

-- name: list_workflows
-- As PostgreSQL's, the steps joined and grouped by workflow; times are Unix seconds.
SELECT w.id, w.name, w.created_at,
       4 * coalesce(max(t.state IN ('pending', 'running', 'waiting', 'parked')), 0)
       + 2 * coalesce(max(t.state = 'failed'), 0)
       + coalesce(max(t.state = 'cancelled'
                      AND coalesce(json_extract(t.events, '$[#-1].move'), '') <> 'skipped'), 0)
       AS code,
       max(t.finished_at),
       count(CASE WHEN t.state = 'pending' THEN 1 END),
       count(CASE WHEN t.state = 'running' THEN 1 END),
       count(CASE WHEN t.state = 'succeeded' THEN 1 END),
       count(CASE WHEN t.state = 'failed' THEN 1 END),
       count(CASE WHEN t.state = 'cancelled' THEN 1 END),
       count(CASE WHEN t.state = 'waiting' THEN 1 END),
       count(CASE WHEN t.state = 'parked' THEN 1 END)
FROM txqueue_workflows AS w
LEFT JOIN txqueue_tasks AS t ON t.workflow_id = w.id
WHERE w.id < :before
  AND (:name IS NULL OR w.name = :name)
  AND (:created_after IS NULL OR w.created_at >= :created_after)
  AND (:created_before IS NULL OR w.created_at < :created_before)
GROUP BY w.id
HAVING :codes IS NULL OR code IN (SELECT value FROM json_each(:codes))
ORDER BY w.id DESC
LIMIT :limit

-- name: open_steps
SELECT id, state FROM txqueue_tasks
WHERE workflow_id = ? AND state IN ('pending', 'running', 'waiting', 'parked')
ORDER BY id

-- name: get_workflow
SELECT name, created_at FROM txqueue_workflows WHERE id = ?

-- name: workflow_steps
-- As PostgreSQL's.
SELECT id, step, name, queue, state, parents, attempts, result,
       CASE WHEN state IN ('failed', 'cancelled') THEN
           coalesce(json_extract(errors, '$[#-1].type') || ': '
                    || json_extract(errors, '$[#-1].message'),
                    json_extract(events, '$[#-1].reason')) END,
       coalesce(json_extract(events, '$[#-1].move'), json_extract(events, '$[#-1].to')),
       finished_at
FROM txqueue_tasks WHERE workflow_id = ? ORDER BY id

-- name: lock_task
SELECT state FROM txqueue_tasks WHERE id = ?

-- part: task_info_columns
-- A task as TaskInfo holds it, in its fields' order: what task_info (sqlite/manage.py) reads.
       id, queue, name, payload, state, priority, run_at, start_time, expires_at,
       finished_at, attempts, max_attempts, timeout, unique_key, worker_id, result, errors,
       created_at, updated_at, cancel_requested, progress,
       coalesce(start_by, run_at + expires_in), time_limit, events, workflow_id, steps

-- name: get_task
SELECT
-- with part: task_info_columns
FROM txqueue_tasks WHERE id = ?

-- name: list_tasks
SELECT
-- with part: task_info_columns
FROM txqueue_tasks
WHERE state = coalesce(:state, state)
  AND queue = coalesce(:queue, queue)
  AND name = coalesce(:name, name)
ORDER BY id DESC
LIMIT :limit

-- part: task_filter
-- As PostgreSQL's: each condition holds where its parameter is NULL; :states and :payload
-- are JSON, times Unix seconds. A payload value matches by its JSON type and value
-- (numbers by value, 42 as 42.0, as jsonb compares them).
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:queue IS NULL OR queue = :queue)
  AND (:name IS NULL OR name = :name)
  AND (:created_after IS NULL OR created_at >= :created_after)
  AND (:created_before IS NULL OR created_at < :created_before)
  AND (:finished_after IS NULL OR finished_at >= :finished_after)
  AND (:finished_before IS NULL OR finished_at < :finished_before)
  AND (:workflow IS NULL OR workflow_id = :workflow)
  AND (:payload IS NULL OR NOT EXISTS (
        SELECT 1 FROM json_each(:payload) AS f
        WHERE NOT EXISTS (
            SELECT 1 FROM json_each(txqueue_tasks.payload) AS p
            WHERE p.key = f.key AND p.atom IS f.atom
              AND (p.type = f.type
                   OR (p.type IN ('integer', 'real') AND f.type IN ('integer', 'real'))))))
  AND (:failed_with IS NULL OR json_extract(errors, '$[#-1].type') = :failed_with
       OR (instr(:failed_with, '.') = 0
           AND substr(json_extract(errors, '$[#-1].type'), -length(:failed_with) - 1)
               = '.' || :failed_with))
  AND (:error IS NULL OR EXISTS (
        SELECT 1 FROM json_each(txqueue_tasks.errors) AS e
        WHERE json_extract(e.value, '$.type') = :error
           OR substr(json_extract(e.value, '$.type'), -length(:error) - 1) = '.' || :error
           OR instr(lower(json_extract(e.value, '$.message')), lower(:error)) > 0))

-- name: find_tasks
SELECT
-- with part: task_info_columns
FROM txqueue_tasks
WHERE id < :before
-- with part: task_filter
ORDER BY id DESC
LIMIT :limit

-- name: count_tasks
SELECT count(*) FROM (
    SELECT 1 FROM txqueue_tasks
    WHERE 1
-- with part: task_filter
    LIMIT coalesce(:cap, -1)
)

-- name: pick_tasks
-- A bulk operation's next batch, in id order above :after, in its write transaction; as
-- PostgreSQL's, a retry leaves a task whose unique key a live task holds.
SELECT id, state, step IS NOT NULL, unique_key
FROM txqueue_tasks
WHERE id > :after AND id < :upto AND NOT (state = 'running' AND cancel_requested)
  AND (NOT :retrying OR unique_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM txqueue_tasks AS o
        WHERE o.unique_key = txqueue_tasks.unique_key
          AND o.state IN ('pending', 'running', 'parked')))
-- with part: task_filter
ORDER BY id
LIMIT :limit

-- name: dead_letters
WITH failed AS (
    SELECT id, name, coalesce(json_extract(errors, '$[#-1].type'), '') AS error,
           json_extract(errors, '$[#-1].message') AS message,
           coalesce(finished_at, updated_at) AS finished_at
    FROM txqueue_tasks
    WHERE state = 'failed' AND json_array_length(errors) > 0
      AND (:queue IS NULL OR queue = :queue)
), grouped AS (
    SELECT name, error, count(*) AS n, min(finished_at) AS first, max(finished_at) AS last
    FROM failed GROUP BY name, error
)
SELECT g.name, g.error, g.n, g.first, g.last,
       (SELECT f.message FROM failed AS f WHERE f.name = g.name AND f.error = g.error
        ORDER BY f.finished_at DESC, f.id DESC LIMIT 1)
FROM grouped AS g
ORDER BY g.n DESC, g.name, g.error
LIMIT :limit

-- name: delete_tasks
DELETE FROM txqueue_tasks
WHERE id IN (SELECT value FROM json_each(:ids))
  AND state IN ('succeeded', 'failed', 'cancelled')

-- name: history
-- As PostgreSQL's, claims included (task.timeline); times are Unix seconds here.
WITH t AS (
    SELECT id, name, queue, state, attempts, start_time, worker_id, events
    FROM txqueue_tasks
    WHERE name = coalesce(:name, name) AND queue = coalesce(:queue, queue)
      AND updated_at >= coalesce(:since, updated_at)
), stored AS (
    SELECT t.id, t.name, t.queue, e.value AS ev FROM t, json_each(t.events) AS e
), claims AS (
    SELECT id, name, queue,
           json_object('at', json_extract(ev, '$.started'),
                       'attempt', json_extract(ev, '$.attempt'), 'move', 'claimed',
                       'from', 'pending', 'to', 'running',
                       'by', json_extract(ev, '$.worker')) AS ev
    FROM stored WHERE json_extract(ev, '$.started') IS NOT NULL
    GROUP BY id, json_extract(ev, '$.attempt'), json_extract(ev, '$.started')
    UNION ALL
    SELECT t.id, t.name, t.queue,
           json_object('at', t.start_time, 'attempt', t.attempts, 'move', 'claimed',
                       'from', 'pending', 'to', 'running', 'by', t.worker_id)
    FROM t
    WHERE t.state = 'running' AND NOT EXISTS (
        SELECT 1 FROM json_each(t.events) AS e
        WHERE json_extract(e.value, '$.attempt') = t.attempts
          -- JSON keeps a time to 15 significant digits (10 us today): the claim's own
          -- time may differ from the column's by that much, another claim's by more.
          AND abs(json_extract(e.value, '$.started') - t.start_time) < 0.00001)
), every_event AS (
    SELECT id, name, queue, ev FROM stored
    UNION ALL
    SELECT id, name, queue, ev FROM claims
)
SELECT id, name, queue, ev FROM every_event
WHERE json_extract(ev, '$.to') = coalesce(:state, json_extract(ev, '$.to'))
  AND (:by IS NULL OR CASE WHEN json_type(ev, '$.by') IS NOT NULL THEN json_extract(ev, '$.by')
                          ELSE json_extract(ev, '$.worker') END = :by)
  AND json_extract(ev, '$.at') >= coalesce(:since, json_extract(ev, '$.at'))
  AND (:until IS NULL OR json_extract(ev, '$.at') < :until)
ORDER BY json_extract(ev, '$.at') DESC, id DESC
LIMIT :limit

-- name: delete_queue
DELETE FROM txqueue_tasks WHERE queue = ?

-- name: status
SELECT queue, state, count(*),
       :now - min(CASE WHEN state = 'pending' AND run_at <= :now THEN run_at END)
FROM txqueue_tasks
GROUP BY queue, state
ORDER BY queue, state


-- presence -----------------------------------------------------------------------------

-- name: worker_seen
-- started_at is written once, by the first refresh.
INSERT INTO txqueue_workers (worker_id, queues, names, started_at, seen_at)
VALUES (:id, :queues, :names, :now, :now)
ON CONFLICT (worker_id) DO UPDATE
SET queues = excluded.queues, names = excluded.names, seen_at = excluded.seen_at

-- name: forget_workers
-- The rows of workers that died without deleting theirs, once no one needs to see them.
DELETE FROM txqueue_workers WHERE seen_at < ?

-- name: worker_gone
DELETE FROM txqueue_workers WHERE worker_id = ?

-- name: live_workers
SELECT count(*) FROM txqueue_workers WHERE seen_at > ?

-- name: unhandled
SELECT t.queue, t.name, count(*)
FROM txqueue_tasks t
WHERE t.state = 'pending' AND NOT EXISTS (
    SELECT 1 FROM txqueue_workers w
    WHERE w.seen_at > :since
      AND EXISTS (SELECT 1 FROM json_each(w.queues) WHERE value = t.queue)
      AND EXISTS (SELECT 1 FROM json_each(w.names) WHERE value = t.name))
GROUP BY t.queue, t.name
ORDER BY t.queue, t.name

-- name: handled
-- Each task name the live workers have a handler for, and the queues they serve it on.
SELECT n.value, json_group_array(DISTINCT q.value)
FROM txqueue_workers w, json_each(w.names) n, json_each(w.queues) q
WHERE w.seen_at > ?
GROUP BY n.value


-- schedules ----------------------------------------------------------------------------

-- name: keep_schedule
-- A changed expression or time zone starts at its own latest slot; a schedule made at run
-- time under the same name stays as it is (see the PostgreSQL store).
INSERT INTO txqueue_schedules AS s (name, task, queue, cron, timezone, last_slot, payload,
                                    catch_up, updated_at)
VALUES (:name, :task, :queue, :cron, :timezone, :last_slot, :payload, :catch_up, :now)
ON CONFLICT (name) DO UPDATE
SET task = excluded.task, queue = excluded.queue, cron = excluded.cron,
    timezone = excluded.timezone, payload = excluded.payload, catch_up = excluded.catch_up,
    updated_at = excluded.updated_at,
    last_slot = CASE WHEN s.cron = excluded.cron AND s.timezone = excluded.timezone
                     THEN s.last_slot ELSE max(s.last_slot, excluded.last_slot) END
WHERE s.source = 'code'

-- part: schedule_columns
name, task, queue, cron, timezone, last_slot, payload, catch_up, paused, source

-- name: schedules_taken
-- Of the names a worker declares in code, those a schedule made at run time holds.
SELECT name FROM txqueue_schedules
WHERE name IN (SELECT value FROM json_each(?)) AND source = 'runtime'

-- name: advance_schedule
-- Compared with the last slot the worker read, and not paused (see the PostgreSQL store);
-- slots are whole seconds, which a REAL holds exactly.
UPDATE txqueue_schedules SET last_slot = :slot, updated_at = :now
WHERE name = :name AND last_slot = :seen AND NOT paused

-- name: list_schedules
SELECT
-- with part: schedule_columns
FROM txqueue_schedules ORDER BY name

-- name: get_schedule
SELECT
-- with part: schedule_columns
FROM txqueue_schedules WHERE name = ?

-- name: add_schedule
INSERT INTO txqueue_schedules (name, task, queue, cron, timezone, last_slot, payload,
                               catch_up, paused, source, updated_at)
VALUES (:name, :task, :queue, :cron, :timezone, :last_slot, :payload, :catch_up, :paused,
        :source, :now)
ON CONFLICT (name) DO NOTHING

-- name: write_schedule
-- Compared with the whole row as read (see the PostgreSQL store); the payload as JSON, not
-- as the text it was written in.
UPDATE txqueue_schedules
SET task = :task, queue = :queue, cron = :cron, timezone = :timezone, last_slot = :last_slot,
    payload = :payload, catch_up = :catch_up, paused = :paused, updated_at = :now
WHERE name = :name AND task = :seen_task AND queue = :seen_queue AND cron = :seen_cron
  AND timezone = :seen_timezone AND last_slot = :seen_last_slot
  AND catch_up = :seen_catch_up AND paused = :seen_paused
  AND json(payload) IS json(:seen_payload)

-- name: delete_schedule
DELETE FROM txqueue_schedules WHERE name = ?


-- leaders ------------------------------------------------------------------------------

-- name: lead
-- Taken when free or lapsed, renewed by its holder; anyone else's live lease is left as it
-- is, and holder tells the caller who has it.
INSERT INTO txqueue_leaders (role, holder, expires_at) VALUES (:role, :holder, :until)
ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE txqueue_leaders.holder = excluded.holder OR txqueue_leaders.expires_at <= :now

-- name: holder
SELECT holder, expires_at FROM txqueue_leaders WHERE role = ?

-- name: resign
DELETE FROM txqueue_leaders WHERE role = ? AND holder = ?


-- dashboard ----------------------------------------------------------------------------
-- Each read is bounded by a LIMIT on an index scan (see the PostgreSQL store's dashboard
-- module), so a table of millions answers as fast as a small one.

-- name: queue_counts
-- SQLite has no LATERAL: one branch per state, each through the finished index for the
-- finished states, and at most :cap tasks of each.
SELECT queue, 'pending', count(*), count(CASE WHEN run_at <= :now THEN 1 END),
       :now - min(CASE WHEN run_at <= :now THEN run_at END)
FROM (SELECT queue, run_at FROM txqueue_tasks WHERE state = 'pending' LIMIT :cap)
GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks WHERE state = 'running' LIMIT :cap)
GROUP BY queue
UNION ALL
SELECT queue, 'parked', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks WHERE state = 'parked' LIMIT :cap)
GROUP BY queue
UNION ALL
SELECT queue, 'succeeded', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks
      WHERE state = 'succeeded' AND finished_at IS NOT NULL
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY queue
UNION ALL
SELECT queue, 'failed', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks
      WHERE state = 'failed' AND finished_at IS NOT NULL
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY queue
UNION ALL
SELECT queue, 'cancelled', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks
      WHERE state = 'cancelled' AND finished_at IS NOT NULL
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY queue

-- name: finished_per_minute
-- The last hour, one branch per state as in queue_counts, each capped.
SELECT 'succeeded', CAST((:now - finished_at) / 60 AS INTEGER), count(*)
FROM (SELECT finished_at FROM txqueue_tasks
      WHERE state = 'succeeded' AND finished_at > :now - 3600
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY 2
UNION ALL
SELECT 'failed', CAST((:now - finished_at) / 60 AS INTEGER), count(*)
FROM (SELECT finished_at FROM txqueue_tasks
      WHERE state = 'failed' AND finished_at > :now - 3600
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY 2

-- name: failing_names
-- The last day's failures, the newest :cap of them.
SELECT name, count(*)
FROM (SELECT name FROM txqueue_tasks
      WHERE state = 'failed' AND finished_at > :now - 86400
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY name
ORDER BY 2 DESC, 1
LIMIT :limit

-- name: browse
-- Filters apply within a window of the :window newest tasks below :before, so a filter
-- that matches little still reads a bounded number of rows; window_end says where the
-- next window starts.
SELECT
-- with part: task_info_columns
FROM (SELECT * FROM txqueue_tasks WHERE id < :before ORDER BY id DESC LIMIT :window)
WHERE state = coalesce(:state, state)
  AND queue = coalesce(:queue, queue)
  AND name = coalesce(:name, name)
ORDER BY id DESC
LIMIT :limit

-- name: window_end
SELECT id FROM txqueue_tasks WHERE id < :before ORDER BY id DESC
LIMIT 1 OFFSET :window - 1

-- name: running_tasks
SELECT
-- with part: task_info_columns
FROM txqueue_tasks WHERE state = 'running'
ORDER BY expires_at LIMIT :limit

-- name: workers
SELECT worker_id, queues, started_at, seen_at FROM txqueue_workers
WHERE seen_at > :now - :alive
ORDER BY worker_id LIMIT 1000


-- queues -------------------------------------------------------------------------------

-- name: change_queue
-- As on PostgreSQL: the settings named in :set change, the others stay.
INSERT INTO txqueue_queues AS q (queue, paused, rate_limit, rate_period, concurrency,
                                 fair_share, updated_at)
VALUES (:queue, coalesce(:paused, 0), :rate_limit, :rate_period, :concurrency,
        coalesce(:fair_share, 0), :now)
ON CONFLICT (queue) DO UPDATE
SET paused = CASE WHEN 'paused' IN (SELECT value FROM json_each(:set)) THEN excluded.paused
                  ELSE q.paused END,
    rate_limit = CASE WHEN 'rate' IN (SELECT value FROM json_each(:set))
                      THEN excluded.rate_limit ELSE q.rate_limit END,
    rate_period = CASE WHEN 'rate' IN (SELECT value FROM json_each(:set))
                       THEN excluded.rate_period ELSE q.rate_period END,
    concurrency = CASE WHEN 'concurrency' IN (SELECT value FROM json_each(:set))
                       THEN excluded.concurrency ELSE q.concurrency END,
    fair_share = CASE WHEN 'fair_share' IN (SELECT value FROM json_each(:set))
                      THEN excluded.fair_share ELSE q.fair_share END,
    updated_at = excluded.updated_at
RETURNING queue, paused, rate_limit, rate_period, concurrency, fair_share

-- name: queue_settings
-- The queues paused, limited or shared fairly: a row set back to no settings stays, and is
-- left out.
SELECT queue, paused, rate_limit, rate_period, concurrency, fair_share FROM txqueue_queues
WHERE paused OR rate_limit IS NOT NULL OR concurrency IS NOT NULL OR fair_share
ORDER BY queue

-- name: ripe_tasks
SELECT id, queue FROM txqueue_tasks
WHERE state = 'pending' AND queue = :queue AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: record_step
-- A step's result, appended to the task's steps by the attempt that ran it while that
-- attempt still holds the task (postgres/queries.sql's record_step).
UPDATE txqueue_tasks
SET steps = json_insert(coalesce(steps, '[]'), '$[#]', json_object(
        'name', :name, 'result', json(:result), 'at', :now, 'took', :took,
        'attempt', attempts)),
    updated_at = :now
WHERE id = :id AND attempts = :attempt AND worker_id = :worker_id AND state = 'running'
RETURNING id

-- name: recorded_steps
SELECT steps FROM txqueue_tasks WHERE id = ?

-- ===== sleeps and waits ==================================================
-- name: due_parked
-- As PostgreSQL's, in the caller's write transaction.
SELECT id FROM (SELECT id FROM txqueue_tasks
                WHERE state = 'parked' AND run_at <= :now ORDER BY run_at LIMIT :limit)
UNION
SELECT t.id FROM txqueue_signals AS s
JOIN txqueue_tasks AS t ON t.wait_key = s.key AND t.state = 'parked'
LIMIT :limit

-- name: parked_due
-- Whether wake_parked has anything to do: read first, without the write lock.
SELECT EXISTS (SELECT 1 FROM txqueue_tasks WHERE state = 'parked' AND run_at <= :now)
    OR EXISTS (SELECT 1 FROM txqueue_signals AS s
               JOIN txqueue_tasks AS t ON t.wait_key = s.key AND t.state = 'parked')

-- name: keep_signal
INSERT INTO txqueue_signals (key, payload, sent_at) VALUES (:key, :payload, :now)

-- name: parked_on
SELECT id FROM txqueue_tasks WHERE state = 'parked' AND wait_key = ? ORDER BY id

-- name: forget_ends
-- As PostgreSQL's tell_parents: an earlier end of these children that no wait took.
DELETE FROM txqueue_signals WHERE key IN (SELECT value FROM json_each(:keys))

-- name: tell_parents
-- As PostgreSQL's: the ends of children (a JSON array of ids) kept as signals `task:<id>`.
INSERT INTO txqueue_signals (key, payload, sent_at)
SELECT 'task:' || id, json_object(
           'state', state, 'result', json(result),
           'reason', CASE WHEN state <> 'succeeded' THEN
               coalesce(json_extract(errors, '$[#-1].type') || ': '
                        || json_extract(errors, '$[#-1].message'),
                        json_extract(events, '$[#-1].reason')) END),
       :now
FROM txqueue_tasks WHERE id IN (SELECT value FROM json_each(:ids))

-- name: parked_on_any
SELECT id, wait_key FROM txqueue_tasks
WHERE state = 'parked' AND wait_key IN (SELECT value FROM json_each(:keys)) ORDER BY id

-- name: take_signal
-- As PostgreSQL's: the writer holds the database, so no signal comes between.
DELETE FROM txqueue_signals
WHERE id = (SELECT id FROM txqueue_signals WHERE key = ? ORDER BY id LIMIT 1)
RETURNING coalesce(payload, 'null')

-- name: prune_signals
DELETE FROM txqueue_signals WHERE sent_at < :since
