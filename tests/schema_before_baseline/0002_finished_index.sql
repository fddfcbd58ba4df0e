-- 0002: an index for pruning finished jobs.
-- Maintenance deletes completed, discarded and cancelled jobs older than the retention
-- every round, in batches. Without this index each round scanned the whole table; with
-- it a round reads only the rows it deletes. status's "completed in the last minute"
-- uses it too. Partial, so live jobs (the hot claim path) never touch it.
CREATE INDEX jobs_finished_idx ON supervisor.jobs (finished_at)
    WHERE state IN ('completed', 'discarded', 'cancelled');
COMMENT ON INDEX supervisor.jobs_finished_idx IS
    'prune: finished rows by finished_at; status: recent completions.';
