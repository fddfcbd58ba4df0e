-- 0003: schedules (cron and fixed intervals) and the record of each slot fired.
-- A slot fires once however many supervisors run: the primary key of schedule_fires is
-- (schedule, slot), written in the same transaction as the fired job and as the
-- schedule's done_until mark, so a second supervisor that races for the same slot
-- fails on the key and its job insert rolls back with it. The row lock the supervisors
-- take (FOR UPDATE SKIP LOCKED) only spares them the wasted attempt; the key decides.

CREATE TABLE supervisor.schedules (
    name        text PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 200),
    kind        text NOT NULL CHECK (kind <> ''),
    queue       text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 255),
    args        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(args) = 'object'),
    priority    integer NOT NULL DEFAULT 0,
    cron        text,                                  -- 5 fields, or 6 with seconds first
    every       integer CHECK (every IS NULL OR every >= 1),  -- seconds
    timezone    text NOT NULL DEFAULT 'UTC',
    catch_up    boolean NOT NULL DEFAULT false,
    overlap     boolean NOT NULL DEFAULT true,
    source      text NOT NULL DEFAULT 'code' CHECK (source IN ('code', 'config')),
    paused      boolean NOT NULL DEFAULT false,
    -- Every slot at or before this instant is dealt with (fired, coalesced or skipped).
    -- A new schedule starts at its creation, so it never fires slots from before it.
    done_until  timestamptz NOT NULL DEFAULT now(),
    last_slot   timestamptz,
    last_job_id bigint,                                -- not a foreign key: jobs are pruned
    last_fired_at timestamptz,
    -- Refreshed by every supervisor whose code or config defines the schedule; one
    -- nobody has declared for a while is shown as orphaned (kept, never fired).
    seen_at     timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every IS NULL))
);
COMMENT ON TABLE supervisor.schedules IS
    'Periodic jobs: definition as last declared by a supervisor, pause switch, firing mark.';

CREATE TABLE supervisor.schedule_fires (
    schedule  text NOT NULL REFERENCES supervisor.schedules (name) ON DELETE CASCADE,
    slot      timestamptz NOT NULL,                    -- the fired job's run_at
    job_id    bigint,                                  -- NULL when skipped
    outcome   text NOT NULL CHECK (outcome IN ('fired', 'skipped', 'manual')),
    coalesced integer NOT NULL DEFAULT 1 CHECK (coalesced >= 1),  -- slots this row stands for
    fired_at  timestamptz NOT NULL DEFAULT now(),
    fired_by  text,                                    -- supervisor id, or 'cli'
    PRIMARY KEY (schedule, slot)
);
COMMENT ON TABLE supervisor.schedule_fires IS
    'One row per slot fired (or skipped) per schedule; the key makes a slot fire once.';
