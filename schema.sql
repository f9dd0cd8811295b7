-- txqueue schema: the single source of the DDL.
--
-- `txqueue init` applies each numbered migration below that the database has not
-- recorded yet, in order, each in a transaction of its own under an advisory lock, so
-- running it twice (or from two hosts at once) is harmless. A migration, once released, is
-- never edited: schema changes are new, higher-numbered blocks at the end.

-- Applied before every run of `txqueue init`: the record of applied migrations.
CREATE TABLE IF NOT EXISTS txqueue_migrations (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- migration: 1
CREATE TABLE IF NOT EXISTS txqueue_tasks (
    id            uuid PRIMARY KEY,                -- UUIDv7: time-ordered
    queue         text NOT NULL DEFAULT 'default',
    name          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    priority      smallint NOT NULL DEFAULT 0,     -- higher runs first
    run_at        timestamptz NOT NULL DEFAULT now(),
    start_time    timestamptz,
    expires_at    timestamptz,                     -- lease end while running
    finished_at   timestamptz,
    attempts      integer NOT NULL DEFAULT 0,      -- claims so far; fences outcomes
    max_attempts  integer CHECK (max_attempts >= 1),   -- NULL: the registry's default
    timeout       double precision CHECK (timeout > 0), -- seconds; NULL: the registry's default
    unique_key    text,
    worker_id     text,
    result        jsonb,
    errors        jsonb NOT NULL DEFAULT '[]',     -- one entry per failed attempt
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The idle poll: ripe pending tasks of a queue, best priority first.
CREATE INDEX IF NOT EXISTS txqueue_tasks_ripe
    ON txqueue_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';

-- Lease recovery: running tasks by lease end.
CREATE INDEX IF NOT EXISTS txqueue_tasks_leases
    ON txqueue_tasks (expires_at) WHERE state = 'running';

-- At most one live task per unique key.
CREATE UNIQUE INDEX IF NOT EXISTS txqueue_tasks_unique_key
    ON txqueue_tasks (unique_key) WHERE state IN ('pending', 'running');

-- migration: 2
-- What the cleaner does when a lease expires, copied from the registry at claim time so
-- a cleaner run without the application's code still honours it: NULL or
-- {"policy": "retry"}, {"policy": "abandon"}, {"policy": "compensate", "name", "queue"}.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS on_lease_expired jsonb;
-- `txqueue cancel` on a running task: its handler sees ctx.cancelled.
ALTER TABLE txqueue_tasks
    ADD COLUMN IF NOT EXISTS cancel_requested boolean NOT NULL DEFAULT false;
-- When the cleaner last re-sent a wake-up for a pending task, so it does so once per grace.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS notified_at timestamptz;

-- Pruning: finished tasks by age.
CREATE INDEX IF NOT EXISTS txqueue_tasks_finished
    ON txqueue_tasks (state, finished_at) WHERE finished_at IS NOT NULL;

-- migration: 3
-- The workers running now, each refreshing its row while it runs (and deleting it when it
-- stops), so that `txqueue status` can count the pending tasks no running worker has a
-- handler for.
CREATE TABLE IF NOT EXISTS txqueue_workers (
    worker_id   text PRIMARY KEY,
    queues      jsonb NOT NULL,                  -- the queues it claims from
    names       jsonb NOT NULL,                  -- the task names it has handlers for
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now()
);

-- migration: 4
-- Periodic tasks: one row per schedule. Workers advance `last_slot` by compare-and-set
-- (only forward) in the transaction that enqueues the slot's task, so each slot is
-- enqueued once however many workers keep the schedule.
CREATE TABLE IF NOT EXISTS txqueue_schedules (
    name        text PRIMARY KEY,
    task        text NOT NULL,
    queue       text NOT NULL,
    cron        text NOT NULL,
    timezone    text NOT NULL,
    last_slot   timestamptz NOT NULL,            -- the newest slot enqueued (or passed)
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- migration: 5
-- The trace context of the span that enqueued the task (OpenTelemetry's propagation
-- headers: W3C `traceparent`, `tracestate`), which the worker's span of each attempt
-- continues. NULL when tracing is off.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS trace_context jsonb;

-- migration: 6
-- Roles one process of many holds at a time, by a lease renewed while it runs: the
-- cleaner's loop (`cleaner`), so that one `txqueue cleaner --loop` is active and the others
-- stand by. A lapsed lease goes to whoever asks next. A row, not an advisory lock, so that
-- it holds through a transaction pooler.
CREATE TABLE IF NOT EXISTS txqueue_leaders (
    role        text PRIMARY KEY,
    holder      text NOT NULL,                   -- host:pid:random of the process
    expires_at  timestamptz NOT NULL
);

-- migration: 7
-- Tasks partitioned by `slot`, so that the tables the hot path writes are emptied by
-- TRUNCATE instead of by vacuum, which a transaction held open elsewhere stops
-- (docs/explanation/storage.md). New tasks go to the current slot (0 to 3), read from the sequence
-- `txqueue_slot` (not transactional: a REPEATABLE READ caller still gets the current one);
-- workers move the finished tasks of the other slots to the history (-1) and truncate them.
-- The table as it was stays, attached as the legacy slot (-2), nothing copied; its tasks
-- run where they are and are moved out as the other slots' are.
ALTER TABLE txqueue_tasks ADD COLUMN slot smallint NOT NULL DEFAULT -2;
-- Validated here so that ATTACH does not scan the table a second time.
ALTER TABLE txqueue_tasks ADD CONSTRAINT txqueue_tasks_legacy_slot CHECK (slot = -2);
ALTER TABLE txqueue_tasks RENAME TO txqueue_tasks_legacy;
ALTER INDEX txqueue_tasks_pkey RENAME TO txqueue_tasks_legacy_pkey;
ALTER INDEX txqueue_tasks_ripe RENAME TO txqueue_tasks_legacy_ripe;
ALTER INDEX txqueue_tasks_leases RENAME TO txqueue_tasks_legacy_leases;
ALTER INDEX txqueue_tasks_finished RENAME TO txqueue_tasks_legacy_finished;

-- At most one live task per unique key: a partitioned table cannot enforce it (a unique
-- index must hold the partition key). The statement that ends a task deletes its key.
CREATE TABLE txqueue_unique_keys (
    unique_key  text PRIMARY KEY,
    task_id     uuid NOT NULL
);
INSERT INTO txqueue_unique_keys (unique_key, task_id)
SELECT unique_key, id FROM txqueue_tasks_legacy
WHERE unique_key IS NOT NULL AND state IN ('pending', 'running');
DROP INDEX txqueue_tasks_unique_key;

CREATE SEQUENCE txqueue_slot AS smallint MINVALUE 0 MAXVALUE 3 START 0;
-- An expression, not a query: PostgreSQL inlines it into each INSERT, where a query would be
-- planned again for every row (and slowly with enable_seqscan off, as txqueue's sessions run).
-- The value is NULL until the first rotation sets it.
CREATE FUNCTION txqueue_current_slot() RETURNS smallint LANGUAGE sql VOLATILE
    AS 'SELECT coalesce(pg_sequence_last_value(''txqueue_slot''), 0)::smallint';

-- When each live slot last became the current one (the rotation's clock).
CREATE TABLE txqueue_slots (
    slot   smallint PRIMARY KEY,
    since  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO txqueue_slots (slot) VALUES (0), (1), (2), (3);

CREATE TABLE txqueue_tasks (
    id            uuid NOT NULL,
    queue         text NOT NULL DEFAULT 'default',
    name          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    state         text NOT NULL DEFAULT 'pending'
                  CONSTRAINT txqueue_tasks_state_check
                  CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    priority      smallint NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL DEFAULT now(),
    start_time    timestamptz,
    expires_at    timestamptz,
    finished_at   timestamptz,
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer CONSTRAINT txqueue_tasks_max_attempts_check CHECK (max_attempts >= 1),
    timeout       double precision CONSTRAINT txqueue_tasks_timeout_check CHECK (timeout > 0),
    unique_key    text,
    worker_id     text,
    result        jsonb,
    errors        jsonb NOT NULL DEFAULT '[]',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    on_lease_expired jsonb,
    cancel_requested boolean NOT NULL DEFAULT false,
    notified_at   timestamptz,
    trace_context jsonb,
    slot          smallint NOT NULL DEFAULT txqueue_current_slot()
) PARTITION BY LIST (slot);
CREATE TABLE txqueue_tasks_s0 PARTITION OF txqueue_tasks (PRIMARY KEY (id)) FOR VALUES IN (0);
CREATE TABLE txqueue_tasks_s1 PARTITION OF txqueue_tasks (PRIMARY KEY (id)) FOR VALUES IN (1);
CREATE TABLE txqueue_tasks_s2 PARTITION OF txqueue_tasks (PRIMARY KEY (id)) FOR VALUES IN (2);
CREATE TABLE txqueue_tasks_s3 PARTITION OF txqueue_tasks (PRIMARY KEY (id)) FOR VALUES IN (3);
CREATE TABLE txqueue_tasks_history PARTITION OF txqueue_tasks (PRIMARY KEY (id))
    FOR VALUES IN (-1);
CREATE INDEX txqueue_tasks_ripe
    ON txqueue_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX txqueue_tasks_leases ON txqueue_tasks (expires_at) WHERE state = 'running';
CREATE INDEX txqueue_tasks_finished
    ON txqueue_tasks (state, finished_at) WHERE finished_at IS NOT NULL;
-- Each slot's indexes named after it and its parent's (txqueue_tasks_s0_ripe, ...), as
-- EXPLAIN shows them.
DO $$
DECLARE
    i record;
BEGIN
    FOR i IN
        SELECT c.relname AS name, t.relname AS slot, p.relname AS parent
        FROM pg_inherits AS h
        JOIN pg_class AS c ON c.oid = h.inhrelid
        JOIN pg_class AS p ON p.oid = h.inhparent
        JOIN pg_index AS x ON x.indexrelid = c.oid
        JOIN pg_class AS t ON t.oid = x.indrelid
        WHERE p.relname IN ('txqueue_tasks_ripe', 'txqueue_tasks_leases', 'txqueue_tasks_finished')
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', i.name,
                       i.slot || substr(i.parent, length('txqueue_tasks') + 1));
    END LOOP;
END
$$;
ALTER TABLE txqueue_tasks ATTACH PARTITION txqueue_tasks_legacy FOR VALUES IN (-2);
-- migration: 8
-- Flow control (docs/how-to/flow-control.md): a row per queue that is paused or limited, read
-- by every claim, so a change holds on every worker from its next claim on. No row: the
-- queue runs freely.
CREATE TABLE txqueue_queues (
    queue        text PRIMARY KEY,
    paused       boolean NOT NULL DEFAULT false,
    rate_limit   integer CHECK (rate_limit >= 1),         -- starts per rate_period
    rate_period  double precision CHECK (rate_period > 0), -- seconds
    concurrency  integer CHECK (concurrency >= 1),        -- tasks running at once
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate_limit IS NULL) = (rate_period IS NULL))
);
-- The starts that rate limits count, per bucket (`queue:<name>`, or `key:<key>` for a
-- task's rate_limit_key): a row per claim, with how many it started, kept until its window
-- has passed. A log that claims append to and sum, never a row updated per claim (a counter
-- row would grow a chain of dead versions as long as a held vacuum horizon lasts, and
-- every claim would walk it).
CREATE TABLE txqueue_starts (
    bucket  text NOT NULL,
    at      timestamptz NOT NULL,
    until   timestamptz NOT NULL,               -- at + the period: counted until then
    n       integer NOT NULL                    -- the starts
);
CREATE INDEX txqueue_starts_bucket_at ON txqueue_starts (bucket, at);
-- A running task's concurrency key (its task's concurrency_key argument, with the value
-- given), written by its claim, for the claims that count the key's running tasks.
ALTER TABLE txqueue_tasks ADD COLUMN concurrency_key text;
CREATE INDEX txqueue_tasks_keys ON txqueue_tasks (concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
-- A rate limit's room in `bucket`, for `wanted` starts at `t` (the claim's turn): at most
-- `lim` in any window of `period` seconds, paced `period/lim` apart (a few at once where
-- that is under 10 ms), so that a window's starts do not come in one burst that the next
-- window's could overlap, a handler starting a few milliseconds after its claim. When that
-- is fewer than wanted, `retry_in`: when one more may start. The caller holds the bucket's
-- lock.
CREATE FUNCTION txqueue_rate_room(b text, lim integer, period double precision,
                                  wanted integer, t timestamptz,
                                  OUT room integer, OUT retry_in double precision)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    started integer;
    oldest timestamptz;
    newest timestamptz;
    last_batch integer;
    next_at timestamptz;
    spacing double precision := period / lim;
BEGIN
    -- Bounded below, so that this never walks the versions that earlier claims deleted and
    -- a held vacuum horizon keeps; older entries go with the cleaner's prune.
    DELETE FROM txqueue_starts AS x
    WHERE x.bucket = b AND x.at <= t - make_interval(secs => period)
      AND x.at > t - make_interval(secs => 2 * period);
    SELECT coalesce(sum(x.n), 0), min(x.at), max(x.at) INTO started, oldest, newest
    FROM txqueue_starts AS x
    WHERE x.bucket = b AND x.at > t - make_interval(secs => period);
    next_at := t;
    IF newest IS NOT NULL THEN
        SELECT sum(x.n) INTO last_batch FROM txqueue_starts AS x
        WHERE x.bucket = b AND x.at = newest;
        next_at := greatest(t, newest + make_interval(secs => last_batch * spacing));
    END IF;
    room := least(wanted, lim - started,
                  CASE WHEN next_at > t THEN 0
                       ELSE greatest(1, floor(0.01 / spacing))::integer END);
    room := greatest(room, 0);
    IF room < wanted THEN
        retry_in := greatest(
            extract(epoch FROM next_at - t) + room * spacing,
            CASE WHEN started + room >= lim
                 THEN extract(epoch FROM coalesce(oldest, t) - t) + period ELSE 0 END,
            0);
    END IF;
END
$$;
-- How many of `wanted` tasks a claim may start in queue `q` now; when that is fewer, why
-- (`held`) and, for a rate limit, in how many seconds one more may start; and, for a
-- rate-limited queue (else NULL), the moment its starts are logged at, and the period. A limited queue's claims
-- take turns on a lock of the queue's (transaction-scoped, so it holds through a
-- transaction pooler); VOLATILE, so that the counts taken after the lock see what the
-- claim before committed (the calling statement's snapshot predates the wait). Their
-- starts are logged at the claim's turn, not at now() (when its statement began, before
-- it waited). A free queue costs one primary-key lookup and no lock.
CREATE FUNCTION txqueue_room(q text, wanted integer, OUT room integer, OUT held text,
                             OUT retry_in double precision, OUT logged_at timestamptz,
                             OUT rate_period double precision)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s txqueue_queues;
    running integer;
    rate_room integer;
BEGIN
    room := wanted;
    SELECT * INTO s FROM txqueue_queues WHERE queue = q;
    IF NOT FOUND OR wanted <= 0 OR NOT (s.paused OR s.concurrency IS NOT NULL
                                        OR s.rate_limit IS NOT NULL) THEN
        RETURN;
    END IF;
    IF s.paused THEN
        room := 0;
        held := 'paused';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('txqueue.queue:' || q, 0));
    SELECT * INTO s FROM txqueue_queues WHERE queue = q;
    IF NOT FOUND OR NOT (s.paused OR s.concurrency IS NOT NULL OR s.rate_limit IS NOT NULL) THEN
        RETURN;
    ELSIF s.paused THEN
        room := 0;
        held := 'paused';
        RETURN;
    END IF;
    IF s.concurrency IS NOT NULL THEN
        SELECT count(*) INTO running FROM txqueue_tasks
        WHERE state = 'running' AND queue = q AND slot <> -1;
        IF s.concurrency - running < room THEN
            room := greatest(s.concurrency - running, 0);
            held := 'concurrency';
        END IF;
    END IF;
    IF s.rate_limit IS NOT NULL THEN
        logged_at := clock_timestamp();
        rate_period := s.rate_period;
        SELECT r.room, r.retry_in INTO rate_room, retry_in
        FROM txqueue_rate_room('queue:' || q, s.rate_limit, s.rate_period, room, logged_at) AS r;
        IF rate_room < room THEN
            room := rate_room;
            held := 'rate';
        END IF;
    END IF;
END
$$;
-- The room task keys leave, for a claim's candidates: for each key (`kinds[i]` 'concurrency':
-- at most `lims[i]` of its tasks running, in any queue; 'rate': txqueue_rate_room on
-- bucket `key:<key>`), the room for `wanted[i]` of its tasks. Each key has a lock of its
-- own, taken here in the order given (the caller's: kinds, then keys), after the caller's
-- queues' (txqueue_room), so that two claims never deadlock.
CREATE FUNCTION txqueue_key_rooms(kinds text[], ks text[], lims integer[],
                                  periods double precision[], wanted integer[])
RETURNS TABLE (kind text, k text, room integer, retry_in double precision,
               logged_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    i integer;
    t timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('txqueue.' || u.kind || ':' || u.k, 0))
    FROM unnest(kinds, ks) WITH ORDINALITY AS u(kind, k, n)
    ORDER BY u.n;
    t := clock_timestamp();
    RETURN QUERY
    SELECT u.kind, u.k, greatest(least(u.wanted, u.lim - coalesce(r.n, 0)), 0)::integer,
           NULL::double precision, NULL::timestamptz
    FROM unnest(kinds, ks, lims, wanted) AS u(kind, k, lim, wanted)
    LEFT JOIN (SELECT x.concurrency_key, count(*) AS n FROM txqueue_tasks AS x
               WHERE x.state = 'running' AND x.slot <> -1
                 AND x.concurrency_key = ANY(ks)
               GROUP BY x.concurrency_key) AS r ON r.concurrency_key = u.k
    WHERE u.kind = 'concurrency';
    FOR i IN 1 .. coalesce(cardinality(ks), 0) LOOP
        CONTINUE WHEN kinds[i] <> 'rate';
        RETURN QUERY
        SELECT 'rate'::text, ks[i], r.room, r.retry_in, t
        FROM txqueue_rate_room('key:' || ks[i], lims[i], periods[i], wanted[i], t) AS r;
    END LOOP;
END
$$;
-- migration: 9
-- Fair share (docs/how-to/flow-control.md): a queue whose keys take turns. A task's key is
-- written at enqueue (its task's concurrency_key argument, with the value given), and
-- indexed on pending rows that have one, for the fair claim's skip scan over the keys.
-- Tasks without a key cost this index nothing.
ALTER TABLE txqueue_queues ADD COLUMN fair_share boolean NOT NULL DEFAULT false;
CREATE INDEX txqueue_tasks_fair ON txqueue_tasks (queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;
DO $$
DECLARE
    i record;
BEGIN
    FOR i IN
        SELECT c.relname AS name, t.relname AS slot
        FROM pg_inherits AS h
        JOIN pg_class AS c ON c.oid = h.inhrelid
        JOIN pg_class AS p ON p.oid = h.inhparent
        JOIN pg_index AS x ON x.indexrelid = c.oid
        JOIN pg_class AS t ON t.oid = x.indrelid
        WHERE p.relname = 'txqueue_tasks_fair'
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', i.name, i.slot || '_fair');
    END LOOP;
END
$$;
DROP FUNCTION txqueue_room(text, integer);
-- txqueue_room (migration 8), and: a fair-share queue is claimed only by the fair claim
-- (`fair`), the others only by the plain ones. A claim of the wrong kind gets no room, and
-- `held` says which kind to use: 'fair' or 'plain'.
CREATE FUNCTION txqueue_room(q text, wanted integer, fair boolean DEFAULT false,
                             OUT room integer, OUT held text,
                             OUT retry_in double precision, OUT logged_at timestamptz,
                             OUT rate_period double precision)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    s txqueue_queues;
    running integer;
    rate_room integer;
BEGIN
    room := wanted;
    SELECT * INTO s FROM txqueue_queues WHERE queue = q;
    IF coalesce(s.fair_share, false) <> fair THEN
        room := 0;
        held := CASE WHEN fair THEN 'plain' ELSE 'fair' END;
        RETURN;
    END IF;
    IF NOT FOUND OR wanted <= 0 OR NOT (s.paused OR s.concurrency IS NOT NULL
                                        OR s.rate_limit IS NOT NULL) THEN
        RETURN;
    END IF;
    IF s.paused THEN
        room := 0;
        held := 'paused';
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('txqueue.queue:' || q, 0));
    SELECT * INTO s FROM txqueue_queues WHERE queue = q;
    IF coalesce(s.fair_share, false) <> fair THEN
        room := 0;
        held := CASE WHEN fair THEN 'plain' ELSE 'fair' END;
        RETURN;
    ELSIF NOT FOUND OR NOT (s.paused OR s.concurrency IS NOT NULL OR s.rate_limit IS NOT NULL) THEN
        RETURN;
    ELSIF s.paused THEN
        room := 0;
        held := 'paused';
        RETURN;
    END IF;
    IF s.concurrency IS NOT NULL THEN
        SELECT count(*) INTO running FROM txqueue_tasks
        WHERE state = 'running' AND queue = q AND slot <> -1;
        IF s.concurrency - running < room THEN
            room := greatest(s.concurrency - running, 0);
            held := 'concurrency';
        END IF;
    END IF;
    IF s.rate_limit IS NOT NULL THEN
        logged_at := clock_timestamp();
        rate_period := s.rate_period;
        SELECT r.room, r.retry_in INTO rate_room, retry_in
        FROM txqueue_rate_room('queue:' || q, s.rate_limit, s.rate_period, room, logged_at) AS r;
        IF rate_room < room THEN
            room := rate_room;
            held := 'rate';
        END IF;
    END IF;
END
$$;

-- migration: 10
-- Each task's history: an event per state change (claimed, succeeded, retried, released,
-- recovered, cancelled, retried by hand, ...), appended by the statement that makes the
-- change, in the row it changes (lifecycle.Event). It moves and is pruned with its task.
ALTER TABLE txqueue_tasks ADD COLUMN events jsonb NOT NULL DEFAULT '[]';

-- migration: 11
-- Workflows (docs/how-to/workflows.md). A workflow's steps are tasks. A step with parents
-- is written `waiting`, in a slot of its own (-3) that the rotation never reclaims: a step
-- may wait for hours without holding a slot back, and no claim's index holds it. Each
-- edge is a row of txqueue_waits until its parent ends: the write that ends the parent
-- deletes it, and readies a step none is left for, in the same transaction. No row counts
-- what is left (every parent's end would update it, and a join of thousands would walk a
-- chain of its versions under a held vacuum horizon): the edges left are what is counted.
ALTER TABLE txqueue_tasks DROP CONSTRAINT txqueue_tasks_state_check;
-- The states only widen: every row passes, and NOT VALID spares the check its scan.
ALTER TABLE txqueue_tasks ADD CONSTRAINT txqueue_tasks_state CHECK
    (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled', 'waiting')) NOT VALID;
ALTER TABLE txqueue_tasks ADD COLUMN workflow_id uuid;
ALTER TABLE txqueue_tasks ADD COLUMN step text;      -- its name in its workflow
ALTER TABLE txqueue_tasks ADD COLUMN parents jsonb;  -- {parent's id: OnFailure}
ALTER TABLE txqueue_tasks ADD COLUMN inputs jsonb;   -- {argument: {"as": ..., "from": ...}}
CREATE INDEX txqueue_tasks_workflow ON txqueue_tasks (workflow_id)
    WHERE workflow_id IS NOT NULL;
CREATE TABLE txqueue_tasks_waiting PARTITION OF txqueue_tasks (PRIMARY KEY (id))
    FOR VALUES IN (-3);
CREATE TABLE txqueue_workflows (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    steps       integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE txqueue_waits (
    parent       uuid NOT NULL,
    child        uuid NOT NULL,
    workflow_id  uuid NOT NULL,
    on_failure   text NOT NULL,
    PRIMARY KEY (parent, child)
);
CREATE INDEX txqueue_waits_child ON txqueue_waits (child);
-- The lock the end of a step's parent takes on it before counting its edges left (the
-- count then sees every other parent's end that committed first). One of 64 per workflow:
-- a parent of ten thousand children takes 64 locks, not ten thousand (each is an entry of
-- the server's lock table, which max_locks_per_transaction sizes).
CREATE FUNCTION txqueue_lock_step(workflow uuid, step uuid) RETURNS void LANGUAGE sql AS
    'SELECT pg_advisory_xact_lock(hashtext(workflow::text), hashtext(step::text) & 63)';

-- migration: 12
-- txqueue_lock_step for the children of the steps a write ends, all in one order (by
-- workflow, then bucket), so that two transactions ending parents of the same children
-- never deadlock; how many locks it took.
CREATE FUNCTION txqueue_lock_steps(workflows uuid[], steps uuid[]) RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*) FROM (
        SELECT pg_advisory_xact_lock(flow, bucket)
        FROM (SELECT DISTINCT hashtext(w::text) AS flow, hashtext(s::text) & 63 AS bucket
              FROM unnest(workflows, steps) AS e (w, s) ORDER BY flow, bucket) AS ordered
    ) AS taken
$$;

-- migration: 13
-- Enqueue from SQL: a trigger, a stored procedure, psql, another language's driver. The
-- same rules as Python's enqueue where SQL can check them; each refusal raises SQLSTATE
-- 22023 (invalid_parameter_value) naming the argument, before anything is written. The
-- task is woken by NOTIFY, which PostgreSQL delivers when the caller's transaction commits
-- and never if it rolls back (every worker on PostgreSQL listens, with RabbitMQ or not).
-- A time-ordered UUID (RFC 9562 version 7), as Python's uuid7: the milliseconds since the
-- epoch, then random bits, the version and the variant in their places.
CREATE FUNCTION txqueue_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
            || '7' || substr(r, 14, 3) || substr(r, 17, 16))::uuid
    FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS r) AS random
$$;

CREATE FUNCTION txqueue_enqueue(
    name text,
    payload jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    unique_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    timeout double precision DEFAULT NULL,
    notify boolean DEFAULT true
) RETURNS uuid LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    task uuid := txqueue_uuid7();
    due timestamptz;
    written uuid;
    holder uuid;
    size integer;
    max_size integer := coalesce(nullif(current_setting('txqueue.max_json_bytes', true), '')::integer,
                                 1048576);
BEGIN
    IF name IS NULL OR name !~ '\S' OR length(name) > 200 THEN
        RAISE EXCEPTION 'txqueue_enqueue: name must be 1 to 200 characters, not blank'
            USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,100}$' THEN
        RAISE EXCEPTION 'txqueue_enqueue: queue must match [A-Za-z0-9_.-]{1,100}, got %',
            coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: payload must be JSON, not NULL' USING ERRCODE = '22023';
    END IF;
    size := octet_length(payload::text);
    IF size > max_size THEN
        RAISE EXCEPTION 'txqueue_enqueue: payload is % bytes of JSON, over the limit of % '
            '(txqueue.max_json_bytes)', size, max_size USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'txqueue_enqueue: priority must be between -32768 and 32767, got %',
            coalesce(priority::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(run_at) THEN
        RAISE EXCEPTION 'txqueue_enqueue: run_at must be a finite time, got %', run_at
            USING ERRCODE = '22023';
    END IF;
    IF run_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: delay: give run_at or delay, not both'
            USING ERRCODE = '22023';
    END IF;
    IF delay < interval '0' THEN
        RAISE EXCEPTION 'txqueue_enqueue: delay must not be negative, got %', delay
            USING ERRCODE = '22023';
    END IF;
    IF unique_key IS NOT NULL AND length(unique_key) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'txqueue_enqueue: unique_key must be 1 to 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF concurrency_key IS NOT NULL AND length(concurrency_key) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'txqueue_enqueue: concurrency_key must be 1 to 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'txqueue_enqueue: max_attempts must be between 1 and 1000, got %',
            max_attempts USING ERRCODE = '22023';
    END IF;
    -- A range, not a lower bound alone: NaN sorts above every number, and a lease beyond a
    -- month would not fit the claim's time arithmetic.
    IF timeout NOT BETWEEN 1 AND 2592000 THEN
        RAISE EXCEPTION 'txqueue_enqueue: timeout must be 1 to 2592000 seconds, got %', timeout
            USING ERRCODE = '22023';
    END IF;
    due := coalesce(run_at, now() + coalesce(delay, interval '0'));
    -- A key is taken first, as Python's enqueue takes it; a live holder is returned and
    -- nothing written; a holder that ended without giving it back gives it up.
    FOR attempt IN 1..10 LOOP
        IF unique_key IS NOT NULL THEN
            INSERT INTO txqueue_unique_keys AS k (unique_key, task_id)
            VALUES (unique_key, task) ON CONFLICT ON CONSTRAINT txqueue_unique_keys_pkey DO NOTHING
            RETURNING k.task_id INTO written;
            IF written IS NULL THEN
                SELECT k.task_id INTO holder
                FROM txqueue_unique_keys AS k JOIN txqueue_tasks AS t ON t.id = k.task_id
                WHERE k.unique_key = txqueue_enqueue.unique_key
                  AND t.state IN ('pending', 'running');
                IF holder IS NOT NULL THEN
                    RETURN holder;
                END IF;
                DELETE FROM txqueue_unique_keys AS k
                WHERE k.unique_key = txqueue_enqueue.unique_key AND NOT EXISTS (
                    SELECT 1 FROM txqueue_tasks AS t
                    WHERE t.id = k.task_id AND t.state IN ('pending', 'running'));
                CONTINUE;
            END IF;
        END IF;
        INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                                   timeout, unique_key, concurrency_key)
        VALUES (task, queue, name, payload, priority, due, max_attempts, timeout, unique_key,
                concurrency_key);
        IF notify THEN
            PERFORM pg_notify('txqueue_wakeup', CASE WHEN due > now()
                THEN queue || ' ' || to_char(extract(epoch FROM due), 'FM9999999999990.000')
                ELSE queue END);
        END IF;
        RETURN task;
    END LOOP;
    RAISE EXCEPTION 'txqueue_enqueue: unique_key % kept changing hands; try again',
        quote_literal(unique_key) USING ERRCODE = '40001';
END
$$;

-- migration: 14
-- A running task's progress, as its handler last reported it (ctx.progress): {"done",
-- "total", "message", "at"}, written at most once a second while it runs and kept with its
-- outcome. Nullable without a default: no row is rewritten.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS progress jsonb;

-- migration: 15
-- A task's start deadline (`expires`): an instant (start_by), or seconds after it is due
-- (expires_in: after run_at, which a retry moves); a claim after it fails the task without
-- running it. And its own hard time limit in seconds (`time_limit`), over its
-- registration's. Nullable without a default: no row is rewritten.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS start_by timestamptz;
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS expires_in double precision;
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS time_limit double precision;

-- The SQL enqueue takes them too (as `expires`, an interval after the task is due, or
-- `start_by`, and `time_limit`): the function of migration 13, replaced by one with three
-- more arguments, last, so that calls by position still mean what they meant.
DROP FUNCTION txqueue_enqueue(text, jsonb, text, integer, timestamptz, interval, text, text,
                              integer, double precision, boolean);
CREATE FUNCTION txqueue_enqueue(
    name text,
    payload jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    unique_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    timeout double precision DEFAULT NULL,
    notify boolean DEFAULT true,
    expires interval DEFAULT NULL,
    start_by timestamptz DEFAULT NULL,
    time_limit double precision DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    task uuid := txqueue_uuid7();
    due timestamptz;
    written uuid;
    holder uuid;
    size integer;
    max_size integer := coalesce(nullif(current_setting('txqueue.max_json_bytes', true), '')::integer,
                                 1048576);
BEGIN
    IF name IS NULL OR name !~ '\S' OR length(name) > 200 THEN
        RAISE EXCEPTION 'txqueue_enqueue: name must be 1 to 200 characters, not blank'
            USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,100}$' THEN
        RAISE EXCEPTION 'txqueue_enqueue: queue must match [A-Za-z0-9_.-]{1,100}, got %',
            coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: payload must be JSON, not NULL' USING ERRCODE = '22023';
    END IF;
    size := octet_length(payload::text);
    IF size > max_size THEN
        RAISE EXCEPTION 'txqueue_enqueue: payload is % bytes of JSON, over the limit of % '
            '(txqueue.max_json_bytes)', size, max_size USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'txqueue_enqueue: priority must be between -32768 and 32767, got %',
            coalesce(priority::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(run_at) THEN
        RAISE EXCEPTION 'txqueue_enqueue: run_at must be a finite time, got %', run_at
            USING ERRCODE = '22023';
    END IF;
    IF run_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: delay: give run_at or delay, not both'
            USING ERRCODE = '22023';
    END IF;
    IF delay < interval '0' THEN
        RAISE EXCEPTION 'txqueue_enqueue: delay must not be negative, got %', delay
            USING ERRCODE = '22023';
    END IF;
    IF unique_key IS NOT NULL AND length(unique_key) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'txqueue_enqueue: unique_key must be 1 to 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF concurrency_key IS NOT NULL AND length(concurrency_key) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'txqueue_enqueue: concurrency_key must be 1 to 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'txqueue_enqueue: max_attempts must be between 1 and 1000, got %',
            max_attempts USING ERRCODE = '22023';
    END IF;
    -- A range, not a lower bound alone: NaN sorts above every number, and a lease beyond a
    -- month would not fit the claim's time arithmetic.
    IF timeout NOT BETWEEN 1 AND 2592000 THEN
        RAISE EXCEPTION 'txqueue_enqueue: timeout must be 1 to 2592000 seconds, got %', timeout
            USING ERRCODE = '22023';
    END IF;
    IF expires IS NOT NULL AND start_by IS NOT NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: expires: give expires or start_by, not both'
            USING ERRCODE = '22023';
    END IF;
    IF expires <= interval '0' OR expires > interval '3660 days' THEN
        RAISE EXCEPTION 'txqueue_enqueue: expires must be more than 0 and at most 3660 days, '
            'got %', expires USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(start_by) THEN
        RAISE EXCEPTION 'txqueue_enqueue: start_by must be a finite time, got %', start_by
            USING ERRCODE = '22023';
    END IF;
    IF time_limit IS NOT NULL AND NOT (time_limit > 0 AND time_limit <= 2592000) THEN
        RAISE EXCEPTION 'txqueue_enqueue: time_limit must be more than 0 and at most 2592000 '
            'seconds, got %', time_limit USING ERRCODE = '22023';
    END IF;
    due := coalesce(run_at, now() + coalesce(delay, interval '0'));
    IF start_by <= due THEN
        RAISE EXCEPTION 'txqueue_enqueue: start_by must be after run_at: it would never start'
            USING ERRCODE = '22023';
    END IF;
    -- A key is taken first, as Python's enqueue takes it; a live holder is returned and
    -- nothing written; a holder that ended without giving it back gives it up.
    FOR attempt IN 1..10 LOOP
        IF unique_key IS NOT NULL THEN
            INSERT INTO txqueue_unique_keys AS k (unique_key, task_id)
            VALUES (unique_key, task) ON CONFLICT ON CONSTRAINT txqueue_unique_keys_pkey DO NOTHING
            RETURNING k.task_id INTO written;
            IF written IS NULL THEN
                SELECT k.task_id INTO holder
                FROM txqueue_unique_keys AS k JOIN txqueue_tasks AS t ON t.id = k.task_id
                WHERE k.unique_key = txqueue_enqueue.unique_key
                  AND t.state IN ('pending', 'running');
                IF holder IS NOT NULL THEN
                    RETURN holder;
                END IF;
                DELETE FROM txqueue_unique_keys AS k
                WHERE k.unique_key = txqueue_enqueue.unique_key AND NOT EXISTS (
                    SELECT 1 FROM txqueue_tasks AS t
                    WHERE t.id = k.task_id AND t.state IN ('pending', 'running'));
                CONTINUE;
            END IF;
        END IF;
        INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                                   timeout, unique_key, concurrency_key, start_by, expires_in,
                                   time_limit)
        VALUES (task, queue, name, payload, priority, due, max_attempts, timeout, unique_key,
                concurrency_key, start_by, extract(epoch FROM expires), time_limit);
        IF notify THEN
            PERFORM pg_notify('txqueue_wakeup', CASE WHEN due > now()
                THEN queue || ' ' || to_char(extract(epoch FROM due), 'FM9999999999990.000')
                ELSE queue END);
        END IF;
        RETURN task;
    END LOOP;
    RAISE EXCEPTION 'txqueue_enqueue: unique_key % kept changing hands; try again',
        quote_literal(unique_key) USING ERRCODE = '40001';
END
$$;

-- migration: 16
-- Schedules made at run time (txqueue.create_schedule, `txqueue schedule create`, the
-- dashboard) beside those declared in code. `source` says which: a worker writes only the
-- code's rows and keeps both kinds. A run-time schedule's task arguments and catch_up live
-- here (a code one's are written for show); `paused` stops either kind enqueuing.
ALTER TABLE txqueue_schedules ADD COLUMN IF NOT EXISTS payload jsonb;
ALTER TABLE txqueue_schedules ADD COLUMN IF NOT EXISTS catch_up boolean NOT NULL DEFAULT false;
ALTER TABLE txqueue_schedules ADD COLUMN IF NOT EXISTS paused boolean NOT NULL DEFAULT false;
ALTER TABLE txqueue_schedules ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT 'code'
    CHECK (source IN ('code', 'runtime'));

-- migration: 17
-- The steps a task's handler recorded (ctx.step): [{"name", "result", "at", "took",
-- "attempt"}], in the order they ran, times in Unix seconds. Written by the running attempt
-- that ran each (fenced as an outcome is) and read back by the next attempt's handler,
-- which returns a step's result instead of running it again. Nullable without a default:
-- no row is rewritten, and a task without steps keeps none.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS steps jsonb;

-- migration: 18
-- Sleeps and waits (ctx.sleep, ctx.wait_for): the handler's attempt ends and its task is
-- `parked`, in the slot that waiting workflow steps use (-3), which the rotation never
-- reclaims and no claim reads: a task may sleep a week, and ten thousand of them cost a
-- draining worker nothing. `run_at` is when it wakes; `wait_key`, the signal it waits
-- for. Each worker's recovery pass, and the cleaner, wake the tasks whose time came.
-- A signal (txqueue_signal) is kept in txqueue_signals until a wait takes it, and wakes the
-- tasks parked on its key in the transaction that sends it.
ALTER TABLE txqueue_tasks DROP CONSTRAINT txqueue_tasks_state;
ALTER TABLE txqueue_tasks ADD CONSTRAINT txqueue_tasks_state CHECK
    (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled', 'waiting', 'parked'))
    NOT VALID;
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS wait_key text;
CREATE INDEX IF NOT EXISTS txqueue_tasks_parked
    ON txqueue_tasks_waiting (run_at) WHERE state = 'parked';
CREATE INDEX IF NOT EXISTS txqueue_tasks_wait_keys
    ON txqueue_tasks_waiting (wait_key) WHERE state = 'parked';
CREATE TABLE IF NOT EXISTS txqueue_signals (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key      text NOT NULL,
    payload  jsonb,
    sent_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS txqueue_signals_key ON txqueue_signals (key, id);
-- The lock that orders a signal and a wait of one key: each takes it first, so the second
-- of two that commit together sees the first. Only under read committed, whose statements
-- after the lock see what was committed while it waited: in a repeatable read or
-- serializable transaction, whose snapshot came before, no lock is taken and the level is
-- returned (NULL: locked), for the caller to refuse.
CREATE OR REPLACE FUNCTION txqueue_lock_signal(k text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('txqueue.signal:' || k, 0));
    RETURN NULL;
END
$$;
-- A signal sent from SQL (a trigger, psql), in the caller's transaction: kept for a wait
-- to take, as txqueue.signal keeps it. The tasks parked on its key are woken by the next
-- look of a worker or the cleaner (within about 2 s), not by this.
CREATE OR REPLACE FUNCTION txqueue_signal(key text, payload jsonb DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    level text;
BEGIN
    IF key IS NULL OR length(key) NOT BETWEEN 1 AND 180 THEN
        RAISE EXCEPTION 'txqueue_signal: key must be 1 to 180 characters, not %', key
            USING ERRCODE = '22023';
    END IF;
    level := txqueue_lock_signal(key);
    IF level IS NOT NULL THEN
        RAISE EXCEPTION 'txqueue_signal: the transaction is %; a signal needs read committed',
            level USING ERRCODE = '25000';
    END IF;
    INSERT INTO txqueue_signals (key, payload)
    VALUES (txqueue_signal.key, txqueue_signal.payload);
END
$$;
-- Of the keys `ks`, those a wait parking on them must not sleep through: a signal is kept
-- for the key, or one may be on its way (its lock is held: a signal or a wait's take not
-- committed yet). The lock is only tried, shared: an outcome write, holding the rows of
-- its batch, never waits for a sender's transaction, and two parks on a key pass each
-- other. A wait sent back to pending so takes the key's lock itself, on its next attempt.
CREATE OR REPLACE FUNCTION txqueue_signalled(ks text[]) RETURNS text[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    k text;
    found text[] := '{}';
BEGIN
    FOR k IN SELECT DISTINCT u FROM unnest(ks) AS u WHERE u IS NOT NULL ORDER BY u LOOP
        IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('txqueue.signal:' || k, 0))
           OR EXISTS (SELECT 1 FROM txqueue_signals WHERE key = k) THEN
            found := found || k;
        END IF;
    END LOOP;
    RETURN found;
END
$$;
-- A parked task holds its unique key as a pending or running one does (it is given back
-- when the task finishes): the SQL enqueue of migration 15, the same but for that.
CREATE OR REPLACE FUNCTION txqueue_enqueue(
    name text,
    payload jsonb DEFAULT '{}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    unique_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    timeout double precision DEFAULT NULL,
    notify boolean DEFAULT true,
    expires interval DEFAULT NULL,
    start_by timestamptz DEFAULT NULL,
    time_limit double precision DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    task uuid := txqueue_uuid7();
    due timestamptz;
    written uuid;
    holder uuid;
    size integer;
    max_size integer := coalesce(nullif(current_setting('txqueue.max_json_bytes', true), '')::integer,
                                 1048576);
BEGIN
    IF name IS NULL OR name !~ '\S' OR length(name) > 200 THEN
        RAISE EXCEPTION 'txqueue_enqueue: name must be 1 to 200 characters, not blank'
            USING ERRCODE = '22023';
    END IF;
    IF queue IS NULL OR queue !~ '^[A-Za-z0-9_.-]{1,100}$' THEN
        RAISE EXCEPTION 'txqueue_enqueue: queue must match [A-Za-z0-9_.-]{1,100}, got %',
            coalesce(quote_literal(queue), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: payload must be JSON, not NULL' USING ERRCODE = '22023';
    END IF;
    size := octet_length(payload::text);
    IF size > max_size THEN
        RAISE EXCEPTION 'txqueue_enqueue: payload is % bytes of JSON, over the limit of % '
            '(txqueue.max_json_bytes)', size, max_size USING ERRCODE = '22023';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'txqueue_enqueue: priority must be between -32768 and 32767, got %',
            coalesce(priority::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(run_at) THEN
        RAISE EXCEPTION 'txqueue_enqueue: run_at must be a finite time, got %', run_at
            USING ERRCODE = '22023';
    END IF;
    IF run_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: delay: give run_at or delay, not both'
            USING ERRCODE = '22023';
    END IF;
    IF delay < interval '0' THEN
        RAISE EXCEPTION 'txqueue_enqueue: delay must not be negative, got %', delay
            USING ERRCODE = '22023';
    END IF;
    IF unique_key IS NOT NULL AND length(unique_key) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'txqueue_enqueue: unique_key must be 1 to 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF concurrency_key IS NOT NULL AND length(concurrency_key) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'txqueue_enqueue: concurrency_key must be 1 to 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'txqueue_enqueue: max_attempts must be between 1 and 1000, got %',
            max_attempts USING ERRCODE = '22023';
    END IF;
    -- A range, not a lower bound alone: NaN sorts above every number, and a lease beyond a
    -- month would not fit the claim's time arithmetic.
    IF timeout NOT BETWEEN 1 AND 2592000 THEN
        RAISE EXCEPTION 'txqueue_enqueue: timeout must be 1 to 2592000 seconds, got %', timeout
            USING ERRCODE = '22023';
    END IF;
    IF expires IS NOT NULL AND start_by IS NOT NULL THEN
        RAISE EXCEPTION 'txqueue_enqueue: expires: give expires or start_by, not both'
            USING ERRCODE = '22023';
    END IF;
    IF expires <= interval '0' OR expires > interval '3660 days' THEN
        RAISE EXCEPTION 'txqueue_enqueue: expires must be more than 0 and at most 3660 days, '
            'got %', expires USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(start_by) THEN
        RAISE EXCEPTION 'txqueue_enqueue: start_by must be a finite time, got %', start_by
            USING ERRCODE = '22023';
    END IF;
    IF time_limit IS NOT NULL AND NOT (time_limit > 0 AND time_limit <= 2592000) THEN
        RAISE EXCEPTION 'txqueue_enqueue: time_limit must be more than 0 and at most 2592000 '
            'seconds, got %', time_limit USING ERRCODE = '22023';
    END IF;
    due := coalesce(run_at, now() + coalesce(delay, interval '0'));
    IF start_by <= due THEN
        RAISE EXCEPTION 'txqueue_enqueue: start_by must be after run_at: it would never start'
            USING ERRCODE = '22023';
    END IF;
    -- A key is taken first, as Python's enqueue takes it; a live holder is returned and
    -- nothing written; a holder that ended without giving it back gives it up.
    FOR attempt IN 1..10 LOOP
        IF unique_key IS NOT NULL THEN
            INSERT INTO txqueue_unique_keys AS k (unique_key, task_id)
            VALUES (unique_key, task) ON CONFLICT ON CONSTRAINT txqueue_unique_keys_pkey DO NOTHING
            RETURNING k.task_id INTO written;
            IF written IS NULL THEN
                SELECT k.task_id INTO holder
                FROM txqueue_unique_keys AS k JOIN txqueue_tasks AS t ON t.id = k.task_id
                WHERE k.unique_key = txqueue_enqueue.unique_key
                  AND t.state IN ('pending', 'running', 'parked');
                IF holder IS NOT NULL THEN
                    RETURN holder;
                END IF;
                DELETE FROM txqueue_unique_keys AS k
                WHERE k.unique_key = txqueue_enqueue.unique_key AND NOT EXISTS (
                    SELECT 1 FROM txqueue_tasks AS t
                    WHERE t.id = k.task_id AND t.state IN ('pending', 'running', 'parked'));
                CONTINUE;
            END IF;
        END IF;
        INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                                   timeout, unique_key, concurrency_key, start_by, expires_in,
                                   time_limit)
        VALUES (task, queue, name, payload, priority, due, max_attempts, timeout, unique_key,
                concurrency_key, start_by, extract(epoch FROM expires), time_limit);
        IF notify THEN
            PERFORM pg_notify('txqueue_wakeup', CASE WHEN due > now()
                THEN queue || ' ' || to_char(extract(epoch FROM due), 'FM9999999999990.000')
                ELSE queue END);
        END IF;
        RETURN task;
    END LOOP;
    RAISE EXCEPTION 'txqueue_enqueue: unique_key % kept changing hands; try again',
        quote_literal(unique_key) USING ERRCODE = '40001';
END
$$;

-- migration: 19
-- Children (ctx.start_child): the task whose handler waits for this one's end. A task
-- with a parent, once it finishes, sends the signal `task:<its id>` (its state, result and
-- error) in the transaction that ends it, which wakes the parent's wait.
ALTER TABLE txqueue_tasks ADD COLUMN IF NOT EXISTS parent_id uuid;

-- migration: 20
-- This database's name among several that one fleet of workers serves
-- (docs/how-to/databases.md), recorded by `txqueue init` when databases are named: an
-- enqueue reads it, once per connection, to wake the workers of this database. No row:
-- the only database, unnamed.
CREATE TABLE IF NOT EXISTS txqueue_database (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    name text NOT NULL
);
