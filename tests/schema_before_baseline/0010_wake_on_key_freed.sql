-- 0010: a keyed job that stops running wakes the supervisors (issue 24).
-- A claim of a queue with a per-key limit comes back short while every key with work is
-- at its limit; the queue then counts as empty until a wake. The supervisor that ran the
-- job wakes itself, but the others would wait for their next poll: this trigger sends
-- the queue's usual NOTIFY (0001's notify_available_job) when a job with a concurrency
-- key leaves 'running'. NOTIFY folds identical payloads within a transaction, so a batch
-- of completions sends one per queue; jobs without a key (the hot path) never call the
-- function (the WHEN clause).
CREATE TRIGGER jobs_notify_key_freed
    AFTER UPDATE OF state ON supervisor.jobs
    FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state <> 'running'
          AND NEW.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION supervisor.notify_available_job();
