-- 0007: limits that hold across supervisors (issue 14).
--  * jobs.concurrency_key: jobs sharing a key run at most K at once when their queue has
--    a per-key limit; NULL (the default) is never limited. Settable by plain SQL.
--  * supervisor.queue_limits: a queue's global limits, typed and checked (a table of its
--    own rather than queues.settings: jsonb would store "5" as happily as 5, and a
--    string where a number belongs is the classic config trap; columns with CHECKs
--    refuse it at the door, for the CLI and for plain SQL alike).
--  * supervisor.limit_leases: each supervisor's slice of a limited queue's running slots
--    and rate, renewed about once a second; a slice whose lease ran out is free again.
--    One row per (queue, supervisor) updated once a renewal, never per claim.
--  * supervisor.claim_keyed(): the claim for queues with a per-key limit.

ALTER TABLE supervisor.jobs ADD COLUMN concurrency_key text
    CHECK (concurrency_key IS NULL OR concurrency_key <> '');

-- Counting running jobs per key (the per-key claim) reads only running rows that have a
-- key: small whatever the history, and nothing at all for queues that use no keys.
CREATE INDEX jobs_running_key_idx ON supervisor.jobs (queue, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;
COMMENT ON INDEX supervisor.jobs_running_key_idx IS
    'Per-key limits: running jobs per (queue, concurrency_key).';

CREATE TABLE supervisor.queue_limits (
    queue               text PRIMARY KEY CHECK (char_length(queue) BETWEEN 1 AND 255),
    max_running         integer CHECK (max_running >= 0),
    max_rate            double precision
                        CHECK (max_rate > 0 AND max_rate < 'infinity'::float8),
    burst               integer CHECK (burst >= 1),
    per_key_max_running integer CHECK (per_key_max_running >= 1),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (burst IS NULL OR max_rate IS NOT NULL)
);
COMMENT ON TABLE supervisor.queue_limits IS
    'Limits that hold across every supervisor (supervisor queues limit). No row: none.';

CREATE TABLE supervisor.limit_leases (
    queue      text NOT NULL,
    owner      text NOT NULL,                       -- the supervisor's lease-owner id
    slots      integer NOT NULL DEFAULT 0,          -- running jobs it may hold
    want_slots integer NOT NULL DEFAULT 0,          -- how many it could use now
    rate       double precision NOT NULL DEFAULT 0, -- starts per second it may make
    want_rate  double precision NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, owner)
) WITH (fillfactor = 50);  -- room for HOT updates: each renewal rewrites its row
COMMENT ON TABLE supervisor.limit_leases IS
    'Each supervisor''s slice of a limited queue; free again once expires_at passes.';

-- The claim for a queue with a per-key limit. The advisory lock serialises these claims
-- per queue; being a VOLATILE plpgsql function, the claim query below it takes a fresh
-- snapshot after the lock is granted (READ COMMITTED), so it sees every claim committed
-- by the previous lock holder. A lock taken inside one plain SQL statement would not:
-- that statement's snapshot predates the wait. The lock is held to the commit.
CREATE FUNCTION supervisor.claim_keyed(
    p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text,
    p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer)
RETURNS TABLE (id bigint, kind text, queue text, attempt integer, max_attempts integer,
               priority integer, timeout double precision, args text,
               wait double precision)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('supervisor.claim_keyed'), hashtext(p_queue));
    RETURN QUERY
    WITH busy AS (
        SELECT r.concurrency_key AS key, count(*)::integer AS n
        FROM supervisor.jobs r
        WHERE r.state = 'running' AND r.queue = p_queue AND r.concurrency_key IS NOT NULL
        GROUP BY r.concurrency_key),
    -- Jobs of keys already at their limit are skipped in the ordered scan, so one busy
    -- key's backlog never hides the others' jobs. The window is wider than the claim
    -- because the per-key cap below may drop some of it.
    head AS (
        SELECT j.id AS jid, j.concurrency_key AS key, j.priority AS prio, j.run_at AS due
        FROM supervisor.jobs j
        WHERE j.state = 'available' AND j.queue = p_queue AND j.kind = ANY(p_kinds)
          AND j.run_at <= now()
          AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = p_queue AND q.paused)
          AND (j.concurrency_key IS NULL OR NOT (j.concurrency_key = ANY(ARRAY(
                  SELECT b.key FROM busy b WHERE b.n >= p_per_key))))
        ORDER BY j.priority, j.run_at, j.id
        LIMIT p_limit * 4 + 16),
    picked AS (
        SELECT h.jid FROM (
            SELECT h.*, row_number() OVER (PARTITION BY h.key ORDER BY h.prio, h.due, h.jid)
                        AS nth
            FROM head h) AS h
        LEFT JOIN busy b ON b.key = h.key
        WHERE h.key IS NULL OR h.nth + coalesce(b.n, 0) <= p_per_key
        ORDER BY h.prio, h.due, h.jid
        LIMIT p_limit),
    claimed AS (
        UPDATE supervisor.jobs AS u
        SET state = 'running', attempt = u.attempt + 1, attempted_at = NULL,
            lease_owner = p_owner, lease_expires_at = now() + p_ttl * interval '1 second',
            heartbeat_at = now(),
            max_attempts = coalesce(u.max_attempts, (
                SELECT a.n FROM unnest(p_kinds, p_kind_attempts) AS a(kind, n)
                WHERE a.kind = u.kind), p_default_attempts)
        WHERE u.id = ANY(ARRAY(SELECT jid FROM picked)) AND u.state = 'available'
        RETURNING u.id, u.kind, u.queue, u.attempt, u.max_attempts, u.priority, u.timeout,
                  u.args::text, extract(epoch FROM now() - u.run_at)::float8)
    SELECT * FROM claimed;
END
$$;
