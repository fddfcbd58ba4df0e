-- 0015: a job's last checkpoint (issue 28): the state its handler stored with
-- current_job().checkpoint(...) and when it was written. Kept across attempts (the next
-- attempt, a drain's resumption or a lease rescue, reads it as current_job().resume).
-- Nullable and without a default: adding them rewrites nothing.
ALTER TABLE supervisor.jobs ADD COLUMN checkpoint jsonb, ADD COLUMN checkpoint_at timestamptz;
