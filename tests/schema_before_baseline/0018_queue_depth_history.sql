-- 0018: queue depth over time for the dashboard's queue pages (issue 29): once a
-- minute the maintenance leader writes one row per queue with jobs waiting or running
-- (how many available, how many running, how long the oldest available one has
-- waited), from one count over the state index; never a write per job. Kept as long
-- as supervisor.job_minutes (30 days). A small table of its own: job_minutes rows are
-- per kind and finished jobs, and a depth is neither.
CREATE TABLE IF NOT EXISTS supervisor.queue_minutes (
    minute      timestamptz NOT NULL,
    queue       text NOT NULL,
    available   integer NOT NULL DEFAULT 0,
    running     integer NOT NULL DEFAULT 0,
    oldest_wait double precision,  -- seconds the oldest available job had waited
    PRIMARY KEY (minute, queue)
);
COMMENT ON TABLE supervisor.queue_minutes IS
    'Per minute and queue: available and running jobs, oldest wait (30 days).';
