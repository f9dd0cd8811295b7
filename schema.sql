-- txqueue schema: the single source of the DDL.
--
-- `txqueue init` applies each numbered migration below that the database has not
-- recorded yet, in order, in one transaction under an advisory lock, so running it
-- twice (or from two hosts at once) is harmless. A migration, once released, is
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
