-- 0017: jobs that say what they need (issue 27), and the per-kind circuit breaker.
--
-- cpus and memory (bytes) are a job's reservation; NULL means undeclared: one CPU and,
-- for memory, the p95 of its kind's recent max_rss_bytes (usage, 0014) once there are
-- 20 samples. Nullable and without a default: adding them rewrites nothing, and a
-- producer writing plain SQL may leave them out. The bounds are the producers' checks.
ALTER TABLE supervisor.jobs
    ADD COLUMN cpus integer CHECK (cpus BETWEEN 1 AND 1024),
    ADD COLUMN memory bigint CHECK (memory BETWEEN 1 AND 1099511627776);

-- A kind paused by its circuit breaker (too many crashes across every supervisor within
-- breaker_window) or by hand (supervisor kinds pause). paused_until NULL: until resumed
-- by hand. No supervisor starts a job of a kind whose row is current.
CREATE TABLE supervisor.kind_pauses (
    kind text PRIMARY KEY,
    paused_until timestamptz,
    reason text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    crashes integer NOT NULL DEFAULT 0
);

-- Crashes (crashed, memory, hung, timeout) of the recent past, per kind, across every
-- supervisor: what the breaker counts. Pruned by the supervisors as they insert.
CREATE TABLE supervisor.kind_crashes (
    kind text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX kind_crashes_kind_at ON supervisor.kind_crashes (kind, at);
