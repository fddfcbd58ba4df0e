-- 0016: jobs that expire (issue 28). A producer may give a job an expires_at: a job
-- not started by then is finished as 'expired' (a final state, never run, kept as long
-- as discarded jobs). Plain-SQL producers set the column themselves; NULL (the default)
-- never expires. Nullable and without a default: adding it rewrites nothing.
ALTER TABLE supervisor.jobs ADD COLUMN expires_at timestamptz;

-- The state CHECK of 0001, with the new final state.
ALTER TABLE supervisor.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE supervisor.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('available', 'scheduled', 'running', 'completed', 'retryable',
                     'discarded', 'cancelled', 'expired')) NOT VALID;

-- Pruning and status read finished rows through 0002's partial index: expired rows are
-- finished rows too.
DROP INDEX supervisor.jobs_finished_idx;
CREATE INDEX jobs_finished_idx ON supervisor.jobs (finished_at)
    WHERE state IN ('completed', 'discarded', 'cancelled', 'expired');
COMMENT ON INDEX supervisor.jobs_finished_idx IS
    'prune: finished rows by finished_at; status: recent completions.';

-- The maintenance leader's sweep: waiting jobs whose moment has passed, by expiry.
-- Partial, so only jobs that carry an expiry and still wait are in it.
CREATE INDEX jobs_expiry_idx ON supervisor.jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');
COMMENT ON INDEX supervisor.jobs_expiry_idx IS
    'expire: waiting jobs with an expiry, by expires_at.';
