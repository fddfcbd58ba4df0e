-- 0013: indexes for the dashboard's search, so a page answers in milliseconds on a
-- table of millions instead of scanning it.
--
-- Cost of `supervisor migrate` on a big table: CREATE INDEX reads the whole table once
-- per index and holds a SHARE lock on supervisor.jobs while it does, so enqueues and
-- claims wait (reads do not). Measured on 1,000,000 jobs on a loaded 2-core machine:
-- see docs/dashboard.md ("Upgrading a big table"). Migrations run in one transaction,
-- where CREATE INDEX CONCURRENTLY is not allowed; an operator who cannot pause the
-- queue for that long creates the same indexes CONCURRENTLY by hand first (the names
-- below), and this file then skips them (IF NOT EXISTS).

-- Not here, though the search uses them when they exist: (kind, id), a GIN index on args
-- and (state, queue). Every state change of a job is a non-HOT update (state is in the
-- claim index), so it writes an entry into every index of the table: these three cost
-- 18% of the no-op drain rate (5,676 against 6,939 jobs/s, -n 2, side by side). An
-- operator with millions of jobs who wants the fast search creates them by hand
-- (docs/dashboard.md, "Indexes for big tables").

-- Error messages as words ('simple': no stemming, no stop words, any language), only
-- for jobs that have errors: most rows have none and stay out of the index.
CREATE INDEX IF NOT EXISTS jobs_error_words_idx ON supervisor.jobs
    USING gin (to_tsvector('simple', jsonb_path_query_array(errors, '$[*].message')))
    WHERE errors <> '[]'::jsonb;
COMMENT ON INDEX supervisor.jobs_error_words_idx IS
    'dashboard: words of the error messages (text search).';

-- A time range on created_at: rows are inserted roughly in time order, so a block
-- range index (a few pages for millions of rows) narrows a range to the blocks holding
-- it at almost no cost to inserts.
CREATE INDEX IF NOT EXISTS jobs_created_brin ON supervisor.jobs USING brin (created_at);
COMMENT ON INDEX supervisor.jobs_created_brin IS 'dashboard: jobs created in a time range.';

-- History for the dashboard's charts: per minute, queue and kind, the jobs that
-- finished in that minute. Written by the maintenance leader once a round for the
-- minutes closed since the mark (one statement, never a write per job), kept 30 days.
CREATE TABLE IF NOT EXISTS supervisor.job_minutes (
    minute    timestamptz NOT NULL,
    queue     text NOT NULL,
    kind      text NOT NULL,
    completed integer NOT NULL DEFAULT 0,
    discarded integer NOT NULL DEFAULT 0,
    cancelled integer NOT NULL DEFAULT 0,
    retried   integer NOT NULL DEFAULT 0,           -- attempts past the first they took
    wait_sum  double precision NOT NULL DEFAULT 0,  -- seconds from run_at to the last start
    wait_n    integer NOT NULL DEFAULT 0,
    wait_p95  double precision,
    run_sum   double precision NOT NULL DEFAULT 0,  -- seconds from the last start to the end
    run_n     integer NOT NULL DEFAULT 0,
    run_p95   double precision,
    PRIMARY KEY (minute, queue, kind)
);
COMMENT ON TABLE supervisor.job_minutes IS
    'Per minute, queue and kind: jobs finished, retries, wait and run time (30 days).';
CREATE TABLE IF NOT EXISTS supervisor.rollup_mark (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    rolled_until timestamptz NOT NULL  -- every minute before this one is in job_minutes
);
INSERT INTO supervisor.rollup_mark (rolled_until) VALUES (date_trunc('minute', now()))
ON CONFLICT DO NOTHING;
