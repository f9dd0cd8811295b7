-- txqueue schema for SQLite: the same table as schema.sql, in SQLite's types.
--
-- Times are Unix seconds (REAL), ids UUID text, JSON is text. `txqueue init` applies
-- each numbered migration not recorded yet, in one BEGIN IMMEDIATE transaction. A
-- migration, once released, is never edited: changes are new blocks at the end.

CREATE TABLE IF NOT EXISTS txqueue_migrations (
    version     INTEGER PRIMARY KEY,
    applied_at  REAL NOT NULL
);

-- migration: 1
CREATE TABLE IF NOT EXISTS txqueue_tasks (
    id                TEXT PRIMARY KEY,            -- UUIDv7: time-ordered
    queue             TEXT NOT NULL DEFAULT 'default',
    name              TEXT NOT NULL,
    payload           TEXT NOT NULL DEFAULT '{}',
    state             TEXT NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    priority          INTEGER NOT NULL DEFAULT 0,  -- higher runs first
    run_at            REAL NOT NULL,
    start_time        REAL,
    expires_at        REAL,                        -- lease end while running
    finished_at       REAL,
    attempts          INTEGER NOT NULL DEFAULT 0,  -- claims so far; fences outcomes
    max_attempts      INTEGER CHECK (max_attempts >= 1),  -- NULL: the registry's default
    timeout           REAL CHECK (timeout > 0),    -- seconds; NULL: the registry's default
    unique_key        TEXT,
    worker_id         TEXT,
    result            TEXT,
    errors            TEXT NOT NULL DEFAULT '[]',  -- one entry per failed attempt
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    on_lease_expired  TEXT,                        -- the policy, copied at claim time
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    notified_at       REAL                         -- last re-notified by the cleaner
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS txqueue_tasks_ripe
    ON txqueue_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS txqueue_tasks_leases
    ON txqueue_tasks (expires_at) WHERE state = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS txqueue_tasks_unique_key
    ON txqueue_tasks (unique_key) WHERE state IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS txqueue_tasks_finished
    ON txqueue_tasks (state, finished_at) WHERE finished_at IS NOT NULL;

-- migration: 2
-- The workers running now (see schema.sql, migration 3): `txqueue status` counts the
-- pending tasks no running worker has a handler for.
CREATE TABLE IF NOT EXISTS txqueue_workers (
    worker_id   TEXT PRIMARY KEY,
    queues      TEXT NOT NULL,                     -- JSON array: the queues it claims from
    names       TEXT NOT NULL,                     -- JSON array: the task names it handles
    started_at  REAL NOT NULL,
    seen_at     REAL NOT NULL
) WITHOUT ROWID;

-- migration: 3
-- Periodic tasks (see schema.sql, migration 4): `last_slot` only moves forward, in the
-- transaction that enqueues the slot's task.
CREATE TABLE IF NOT EXISTS txqueue_schedules (
    name        TEXT PRIMARY KEY,
    task        TEXT NOT NULL,
    queue       TEXT NOT NULL,
    cron        TEXT NOT NULL,
    timezone    TEXT NOT NULL,
    last_slot   REAL NOT NULL,                   -- Unix seconds
    updated_at  REAL NOT NULL
) WITHOUT ROWID;

-- migration: 4
-- The trace context of the span that enqueued the task (see schema.sql, migration 5):
-- a JSON object of propagation headers, NULL when tracing is off.
ALTER TABLE txqueue_tasks ADD COLUMN trace_context TEXT;

-- migration: 5
-- Roles one process of many holds at a time, by a renewed lease (see schema.sql,
-- migration 6): the cleaner's loop.
CREATE TABLE IF NOT EXISTS txqueue_leaders (
    role        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    expires_at  REAL NOT NULL                    -- Unix seconds
) WITHOUT ROWID;

-- migration: 6
-- Flow control (see schema.sql, migration 8): a row per queue that is paused or limited,
-- the log of starts that rate limits count, and a running task's concurrency key. A claim
-- holds the write lock, so the counts it takes are exact without a lock of their own.
CREATE TABLE IF NOT EXISTS txqueue_queues (
    queue        TEXT PRIMARY KEY,
    paused       INTEGER NOT NULL DEFAULT 0,
    rate_limit   INTEGER CHECK (rate_limit >= 1),
    rate_period  REAL CHECK (rate_period > 0),
    concurrency  INTEGER CHECK (concurrency >= 1),
    updated_at   REAL NOT NULL,                   -- Unix seconds
    CHECK ((rate_limit IS NULL) = (rate_period IS NULL))
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS txqueue_starts (
    bucket  TEXT NOT NULL,                        -- queue:<name> or key:<key>
    at      REAL NOT NULL,                        -- Unix seconds
    until   REAL NOT NULL,
    n       INTEGER NOT NULL                      -- the starts of one claim
);
CREATE INDEX IF NOT EXISTS txqueue_starts_bucket_at ON txqueue_starts (bucket, at);
ALTER TABLE txqueue_tasks ADD COLUMN concurrency_key TEXT;
CREATE INDEX IF NOT EXISTS txqueue_tasks_keys ON txqueue_tasks (concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

-- migration: 7
-- Fair share (see schema.sql, migration 9): a queue whose keys take turns, and a task's
-- key, written at enqueue, indexed on pending rows that have one.
ALTER TABLE txqueue_queues ADD COLUMN fair_share INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS txqueue_tasks_fair
    ON txqueue_tasks (queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;

-- migration: 8
-- Each task's history (see schema.sql, migration 10): a JSON array of events, appended by
-- the write that changes the task.
ALTER TABLE txqueue_tasks ADD COLUMN events TEXT NOT NULL DEFAULT '[]';

-- migration: 9
-- Workflows (see schema.sql, migration 11): a step with parents is written `waiting`, and
-- each edge is a row of txqueue_waits until its parent ends. SQLite cannot change a
-- column's CHECK in place: the table is built again with the new state, its rows copied.
CREATE TABLE txqueue_tasks_new (
    id                TEXT PRIMARY KEY,
    queue             TEXT NOT NULL DEFAULT 'default',
    name              TEXT NOT NULL,
    payload           TEXT NOT NULL DEFAULT '{}',
    state             TEXT NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled',
                                       'waiting')),
    priority          INTEGER NOT NULL DEFAULT 0,
    run_at            REAL NOT NULL,
    start_time        REAL,
    expires_at        REAL,
    finished_at       REAL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER CHECK (max_attempts >= 1),
    timeout           REAL CHECK (timeout > 0),
    unique_key        TEXT,
    worker_id         TEXT,
    result            TEXT,
    errors            TEXT NOT NULL DEFAULT '[]',
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    on_lease_expired  TEXT,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    notified_at       REAL,
    trace_context     TEXT,
    concurrency_key   TEXT,
    events            TEXT NOT NULL DEFAULT '[]',
    workflow_id       TEXT,
    step              TEXT,                        -- its name in its workflow
    parents           TEXT,                        -- {parent's id: OnFailure}
    inputs            TEXT                         -- {argument: {"as": ..., "from": ...}}
) WITHOUT ROWID;
INSERT INTO txqueue_tasks_new (id, queue, name, payload, state, priority, run_at, start_time,
    expires_at, finished_at, attempts, max_attempts, timeout, unique_key, worker_id, result,
    errors, created_at, updated_at, on_lease_expired, cancel_requested, notified_at,
    trace_context, concurrency_key, events)
SELECT id, queue, name, payload, state, priority, run_at, start_time, expires_at,
       finished_at, attempts, max_attempts, timeout, unique_key, worker_id, result, errors,
       created_at, updated_at, on_lease_expired, cancel_requested, notified_at,
       trace_context, concurrency_key, events
FROM txqueue_tasks;
DROP TABLE txqueue_tasks;
ALTER TABLE txqueue_tasks_new RENAME TO txqueue_tasks;
CREATE INDEX txqueue_tasks_ripe
    ON txqueue_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX txqueue_tasks_leases ON txqueue_tasks (expires_at) WHERE state = 'running';
CREATE UNIQUE INDEX txqueue_tasks_unique_key
    ON txqueue_tasks (unique_key) WHERE state IN ('pending', 'running');
CREATE INDEX txqueue_tasks_finished
    ON txqueue_tasks (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX txqueue_tasks_keys ON txqueue_tasks (concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX txqueue_tasks_fair
    ON txqueue_tasks (queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX txqueue_tasks_workflow ON txqueue_tasks (workflow_id)
    WHERE workflow_id IS NOT NULL;
CREATE TABLE txqueue_workflows (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    steps       INTEGER NOT NULL,
    created_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE txqueue_waits (
    parent       TEXT NOT NULL,
    child        TEXT NOT NULL,
    workflow_id  TEXT NOT NULL,
    on_failure   TEXT NOT NULL,
    PRIMARY KEY (parent, child)
) WITHOUT ROWID;
CREATE INDEX txqueue_waits_child ON txqueue_waits (child);

-- migration: 10
-- A running task's progress (see schema.sql, migration 14).
ALTER TABLE txqueue_tasks ADD COLUMN progress TEXT;

-- migration: 11
-- A task's start deadline and time limit (see schema.sql, migration 15).
ALTER TABLE txqueue_tasks ADD COLUMN start_by REAL;
ALTER TABLE txqueue_tasks ADD COLUMN expires_in REAL;
ALTER TABLE txqueue_tasks ADD COLUMN time_limit REAL;

-- migration: 12
-- Schedules made at run time (see schema.sql, migration 16).
ALTER TABLE txqueue_schedules ADD COLUMN payload TEXT
    CHECK (payload IS NULL OR json_valid(payload));
ALTER TABLE txqueue_schedules ADD COLUMN catch_up INTEGER NOT NULL DEFAULT 0;
ALTER TABLE txqueue_schedules ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE txqueue_schedules ADD COLUMN source TEXT NOT NULL DEFAULT 'code'
    CHECK (source IN ('code', 'runtime'));

-- migration: 13
-- The steps a task's handler recorded (see schema.sql, migration 17).
ALTER TABLE txqueue_tasks ADD COLUMN steps TEXT CHECK (steps IS NULL OR json_valid(steps));

-- migration: 14
-- Sleeps and waits (see schema.sql, migration 18): a `parked` state, the signal a parked
-- task waits for, and the signals kept until a wait takes them. The state's CHECK cannot
-- change in place: the table is built again, as migration 9 did, its rows copied. A parked
-- task holds its unique key, as a pending or running one does.
CREATE TABLE txqueue_tasks_new (
    id                TEXT PRIMARY KEY,
    queue             TEXT NOT NULL DEFAULT 'default',
    name              TEXT NOT NULL,
    payload           TEXT NOT NULL DEFAULT '{}',
    state             TEXT NOT NULL DEFAULT 'pending'
                      CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled',
                                       'waiting', 'parked')),
    priority          INTEGER NOT NULL DEFAULT 0,
    run_at            REAL NOT NULL,
    start_time        REAL,
    expires_at        REAL,
    finished_at       REAL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER CHECK (max_attempts >= 1),
    timeout           REAL CHECK (timeout > 0),
    unique_key        TEXT,
    worker_id         TEXT,
    result            TEXT,
    errors            TEXT NOT NULL DEFAULT '[]',
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    on_lease_expired  TEXT,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    notified_at       REAL,
    trace_context     TEXT,
    concurrency_key   TEXT,
    events            TEXT NOT NULL DEFAULT '[]',
    workflow_id       TEXT,
    step              TEXT,                        -- its name in its workflow
    parents           TEXT,                        -- {parent's id: OnFailure}
    inputs            TEXT,                        -- {argument: {"as": ..., "from": ...}}
    progress          TEXT,
    start_by          REAL,
    expires_in        REAL,
    time_limit        REAL,
    steps             TEXT CHECK (steps IS NULL OR json_valid(steps)),
    wait_key          TEXT                         -- parked: the signal it waits for
) WITHOUT ROWID;
INSERT INTO txqueue_tasks_new (id, queue, name, payload, state, priority, run_at, start_time,
    expires_at, finished_at, attempts, max_attempts, timeout, unique_key, worker_id, result,
    errors, created_at, updated_at, on_lease_expired, cancel_requested, notified_at,
    trace_context, concurrency_key, events, workflow_id, step, parents, inputs, progress,
    start_by, expires_in, time_limit, steps)
SELECT id, queue, name, payload, state, priority, run_at, start_time, expires_at,
       finished_at, attempts, max_attempts, timeout, unique_key, worker_id, result, errors,
       created_at, updated_at, on_lease_expired, cancel_requested, notified_at,
       trace_context, concurrency_key, events, workflow_id, step, parents, inputs, progress,
       start_by, expires_in, time_limit, steps
FROM txqueue_tasks;
DROP TABLE txqueue_tasks;
ALTER TABLE txqueue_tasks_new RENAME TO txqueue_tasks;
CREATE INDEX txqueue_tasks_ripe
    ON txqueue_tasks (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX txqueue_tasks_leases ON txqueue_tasks (expires_at) WHERE state = 'running';
CREATE UNIQUE INDEX txqueue_tasks_unique_key
    ON txqueue_tasks (unique_key) WHERE state IN ('pending', 'running', 'parked');
CREATE INDEX txqueue_tasks_finished
    ON txqueue_tasks (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX txqueue_tasks_keys ON txqueue_tasks (concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX txqueue_tasks_fair
    ON txqueue_tasks (queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX txqueue_tasks_workflow ON txqueue_tasks (workflow_id)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX txqueue_tasks_parked ON txqueue_tasks (run_at) WHERE state = 'parked';
CREATE INDEX txqueue_tasks_wait_keys ON txqueue_tasks (wait_key) WHERE state = 'parked';
CREATE TABLE txqueue_signals (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    key      TEXT NOT NULL,
    payload  TEXT CHECK (payload IS NULL OR json_valid(payload)),
    sent_at  REAL NOT NULL
);
CREATE INDEX txqueue_signals_key ON txqueue_signals (key, id);

-- migration: 15
-- Children (ctx.start_child): as PostgreSQL's migration 19.
ALTER TABLE txqueue_tasks ADD COLUMN parent_id TEXT;
