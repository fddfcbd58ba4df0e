-- 0014: what a job's last attempt cost (issue 26): {"cpu_seconds", "wall_seconds",
-- "max_rss_bytes"}, written with the attempt's outcome. Failed attempts keep theirs in
-- their errors entry. Nullable and without a default: adding it rewrites nothing, and
-- jobs from before (or plain-SQL rows) simply have no usage.
ALTER TABLE supervisor.jobs ADD COLUMN usage jsonb;
