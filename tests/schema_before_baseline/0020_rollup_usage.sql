-- 0020: what the finished jobs of a minute cost (issue 29), rolled up with the rest by
-- the same once-a-minute statement (no write per job): the sum of their last attempts'
-- usage cpu_seconds and the largest max_rss_bytes. NULL when none of them has a usage
-- (rows from before 0014, jobs their parent ended, plain-SQL rows), so "unknown" does
-- not read as "free". Nullable, no default: adding them rewrites nothing.
ALTER TABLE supervisor.job_minutes
    ADD COLUMN IF NOT EXISTS cpu_seconds double precision,
    ADD COLUMN IF NOT EXISTS max_rss_bytes bigint;
COMMENT ON COLUMN supervisor.job_minutes.cpu_seconds IS
    'Sum of the usage cpu_seconds of the jobs finished this minute (NULL: none had a usage).';
COMMENT ON COLUMN supervisor.job_minutes.max_rss_bytes IS
    'Largest usage max_rss_bytes of the jobs finished this minute (NULL: none had a usage).';
