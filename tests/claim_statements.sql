-- The claim statements as they were before the claim builder (recorded from the
-- str.replace variants of supervisor/db/sql.py); tests/test_claim_sql.py checks the
-- builder still produces each of them, whitespace aside. Do not edit by hand.
-- One change since the recording: the flag of the carrying and alone forms is named
-- (false AS done), so their rows are read by column name; and a completion sets
-- attempted_at when its start was never written (issue 30: a job of about 0.1 s could
-- end completed with attempted_at NULL); and a completion stores what its attempt cost
-- and printed (usage, output: issues 26 and 29); and every form returns the job's last
-- checkpoint (issue 28: checkpoint::text AS checkpoint, the child's resume).
-- Since schema 0032 (issue 40) every read and write of supervisor.jobs here says ONLY:
-- finished jobs move into archives that inherit from it, which a claim never reads.
-- Since issue 31 a carried completion also sets the attempt's start from ``ran``
-- (seconds since its start, when that start was held back and never written).
-- Issue 28 (schema 0016): every scan that chooses candidates skips expired jobs
-- (claim.RULES), and every form returns expires_at (epoch seconds) for the child's check.
-- Issue 27 (0017): every form also returns the reservation columns cpus and memory (the
-- keyed form reads its extra columns by primary key through a join instead of scalar
-- subqueries).
-- Issue 45 (0027): every form also returns the counted resources (resources::text AS
-- resources; the keyed form through its join).
-- Issue 42 (0028): a fair queue's claim (fair = "batch"), three forms recorded when it
-- was added at the end; the recordings above are unchanged by it.
-- Issue 40: the plain claim's scan starts after a claim-order key (start_priority,
-- start_run_at, start_id: the claim cursor), and every form returns the job's run_at.
-- The carried completions' and starts' state test compares in the "C" collation, and
-- their redundant "j.id = ANY" is gone (issue 40: through the primary key, one probe per
-- row of the batch, never the partial index on running rows; _FENCE in supervisor/db/sql.py).
-- Issues 40 and 42 together: a fair claim's group of jobs of no batch starts after the
-- same key, its loose scan of the batches at a batch id (first_batch: the fair claim's
-- batch cursor), and it also returns each job's batch_id and that first batch found
-- again (first_batch), for the cursors; the three fair forms were regenerated from the
-- builder.
-- Issues 40 and 42 again: a fair claim's walk of the batches knows the batches this
-- supervisor claimed from (known_batches and their keys: each read past the last member
-- it took) and looks for others only in the gaps between them, from after_batch; every
-- fair form is a wrapping one (the bare form as the alone form) and returns where its
-- group of jobs of no batch starts next (loose_priority, loose_run_at, loose_id, from
-- its look at the head and what it took); its scans of jobs_fair_idx test the state as
-- that index's predicate does (state || '' = 'available'); the three fair forms were
-- regenerated from the builder.
-- Issue 40 again: the carried completions and starts reach their rows by their ids
-- ("j.id = ANY(...)") and no other way, and read each row's values from the batch's
-- arrays at its place among the ids (width_bucket: a binary search; the ids are sent
-- sorted): no join, so no plan, generic or not, that scans the whole primary key (under
-- a held horizon a VACUUM leaves the table's estimate at one row) or tests every row of
-- the batch against every other (_by_place in supervisor/db/sql.py); the keyed form
-- reads its extra columns by a lateral probe of the primary key for each row its
-- function returned. Regenerated from the builder.

-- @@ claim
UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() AND (priority, run_at, id) > (%(start_priority)s::int, to_timestamp(%(start_run_at)s::float8), %(start_id)s::bigint)
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at

-- @@ claim_aged
UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM ONLY supervisor.jobs
     WHERE state = 'available' AND queue = %(queue)s ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM ONLY supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = %(queue)s AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT %(limit)s) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND priority = levels.priority
      AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() - %(aging)s::float8 * interval '1 second'
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY run_at, id
    LIMIT %(limit)s) AS aged))
      AND state = 'available' AND queue = %(queue)s AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / %(aging)s::float8),
             run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at

-- @@ claim_keyed
SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.checkpoint::text AS checkpoint,
       extract(epoch FROM j.expires_at)::float8 AS expires_at, j.cpus, j.memory,
       j.resources::text AS resources,
       extract(epoch FROM j.run_at)::float8 AS run_at
FROM supervisor.claim_keyed(%(queue)s, %(kinds)s::text[], %(limit)s::int, %(per_key)s::int,
                            %(owner)s, %(ttl)s::float8, %(kind_attempts)s::int[],
                            %(default_attempts)s::int) AS k,
     LATERAL (SELECT * FROM ONLY supervisor.jobs WHERE id = k.id OFFSET 0) AS j

-- @@ complete_and_claim
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT %(results_json)s::jsonb) -> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1)) -> 0, usage = nullif((SELECT %(usages_json)s::jsonb) -> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1), 'null'),
    output = (SELECT %(outputs_json)s::jsonb) ->> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT %(ran)s::float8[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = (SELECT %(ids)s::bigint[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))] AND j.attempt = (SELECT %(attempts)s::int[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))] AND j.lease_owner = %(owner)s AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = (SELECT %(started_ids)s::bigint[])[width_bucket(j.id, (SELECT %(started_ids)s::bigint[]))] AND j.attempt = (SELECT %(started_attempts)s::int[])[width_bucket(j.id, (SELECT %(started_ids)s::bigint[]))] AND j.lease_owner = %(owner)s AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() AND (priority, run_at, id) > (%(start_priority)s::int, to_timestamp(%(start_run_at)s::float8), %(start_id)s::bigint)
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_aged
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT %(results_json)s::jsonb) -> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1)) -> 0, usage = nullif((SELECT %(usages_json)s::jsonb) -> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1), 'null'),
    output = (SELECT %(outputs_json)s::jsonb) ->> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT %(ran)s::float8[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = (SELECT %(ids)s::bigint[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))] AND j.attempt = (SELECT %(attempts)s::int[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))] AND j.lease_owner = %(owner)s AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = (SELECT %(started_ids)s::bigint[])[width_bucket(j.id, (SELECT %(started_ids)s::bigint[]))] AND j.attempt = (SELECT %(started_attempts)s::int[])[width_bucket(j.id, (SELECT %(started_ids)s::bigint[]))] AND j.lease_owner = %(owner)s AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM ONLY supervisor.jobs
     WHERE state = 'available' AND queue = %(queue)s ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM ONLY supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = %(queue)s AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT %(limit)s) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND priority = levels.priority
      AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() - %(aging)s::float8 * interval '1 second'
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY run_at, id
    LIMIT %(limit)s) AS aged))
      AND state = 'available' AND queue = %(queue)s AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / %(aging)s::float8),
             run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_keyed
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT %(results_json)s::jsonb) -> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1)) -> 0, usage = nullif((SELECT %(usages_json)s::jsonb) -> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1), 'null'),
    output = (SELECT %(outputs_json)s::jsonb) ->> (width_bucket(j.id, (SELECT %(ids)s::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT %(ran)s::float8[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = (SELECT %(ids)s::bigint[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))] AND j.attempt = (SELECT %(attempts)s::int[])[width_bucket(j.id, (SELECT %(ids)s::bigint[]))] AND j.lease_owner = %(owner)s AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = (SELECT %(started_ids)s::bigint[])[width_bucket(j.id, (SELECT %(started_ids)s::bigint[]))] AND j.attempt = (SELECT %(started_attempts)s::int[])[width_bucket(j.id, (SELECT %(started_ids)s::bigint[]))] AND j.lease_owner = %(owner)s AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS (SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.checkpoint::text AS checkpoint,
       extract(epoch FROM j.expires_at)::float8 AS expires_at, j.cpus, j.memory,
       j.resources::text AS resources,
       extract(epoch FROM j.run_at)::float8 AS run_at
FROM supervisor.claim_keyed(%(queue)s, %(kinds)s::text[], %(limit)s::int, %(per_key)s::int,
                            %(owner)s, %(ttl)s::float8, %(kind_attempts)s::int[],
                            %(default_attempts)s::int) AS k,
     LATERAL (SELECT * FROM ONLY supervisor.jobs WHERE id = k.id OFFSET 0) AS j)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ claim_alone_prepared
WITH claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $1, lease_expires_at = now() + $2 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($3::text[], $4::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $5)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = $6 AND kind = ANY($3::text[])
      AND run_at <= now() AND (priority, run_at, id) > ($7::int, to_timestamp($8::float8), $9::bigint)
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $6 AND q.paused)
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT $10
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed

-- @@ claim_aged_alone_prepared
WITH claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $1, lease_expires_at = now() + $2 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($3::text[], $4::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $5)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM ONLY supervisor.jobs
     WHERE state = 'available' AND queue = $6 ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM ONLY supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = $6 AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = $6 AND kind = ANY($3::text[])
      AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT $7) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = $6 AND priority = levels.priority
      AND kind = ANY($3::text[])
      AND run_at <= now() - $8::float8 * interval '1 second'
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY run_at, id
    LIMIT $7) AS aged))
      AND state = 'available' AND queue = $6 AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $6 AND q.paused)
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / $8::float8),
             run_at, id
    LIMIT $7
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed

-- @@ claim_keyed_alone_prepared
WITH claimed AS (SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.checkpoint::text AS checkpoint,
       extract(epoch FROM j.expires_at)::float8 AS expires_at, j.cpus, j.memory,
       j.resources::text AS resources,
       extract(epoch FROM j.run_at)::float8 AS run_at
FROM supervisor.claim_keyed($1, $2::text[], $3::int, $4::int,
                            $5, $6::float8, $7::int[],
                            $8::int) AS k,
     LATERAL (SELECT * FROM ONLY supervisor.jobs WHERE id = k.id OFFSET 0) AS j)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed

-- @@ complete_and_claim_prepared
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT $1::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1)) -> 0, usage = nullif((SELECT $3::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1), 'null'),
    output = (SELECT $4::jsonb) ->> (width_bucket(j.id, (SELECT $2::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT $5::float8[])[width_bucket(j.id, (SELECT $2::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY($2::bigint[]) AND j.id = (SELECT $2::bigint[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.attempt = (SELECT $6::int[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY($8::bigint[]) AND j.id = (SELECT $8::bigint[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.attempt = (SELECT $9::int[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($2::bigint[]))),
claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $7, lease_expires_at = now() + $10 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($11::text[], $12::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $13)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = $14 AND kind = ANY($11::text[])
      AND run_at <= now() AND (priority, run_at, id) > ($15::int, to_timestamp($16::float8), $17::bigint)
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $14 AND q.paused)
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT $18
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_aged_prepared
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT $1::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1)) -> 0, usage = nullif((SELECT $3::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1), 'null'),
    output = (SELECT $4::jsonb) ->> (width_bucket(j.id, (SELECT $2::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT $5::float8[])[width_bucket(j.id, (SELECT $2::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY($2::bigint[]) AND j.id = (SELECT $2::bigint[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.attempt = (SELECT $6::int[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY($8::bigint[]) AND j.id = (SELECT $8::bigint[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.attempt = (SELECT $9::int[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($2::bigint[]))),
claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $7, lease_expires_at = now() + $10 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($11::text[], $12::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $13)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM ONLY supervisor.jobs
     WHERE state = 'available' AND queue = $14 ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM ONLY supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = $14 AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = $14 AND kind = ANY($11::text[])
      AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY priority, run_at, id
    LIMIT $15) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = $14 AND priority = levels.priority
      AND kind = ANY($11::text[])
      AND run_at <= now() - $16::float8 * interval '1 second'
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY run_at, id
    LIMIT $15) AS aged))
      AND state = 'available' AND queue = $14 AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $14 AND q.paused)
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / $16::float8),
             run_at, id
    LIMIT $15
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_keyed_prepared
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT $1::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1)) -> 0, usage = nullif((SELECT $3::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1), 'null'),
    output = (SELECT $4::jsonb) ->> (width_bucket(j.id, (SELECT $2::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT $5::float8[])[width_bucket(j.id, (SELECT $2::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY($2::bigint[]) AND j.id = (SELECT $2::bigint[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.attempt = (SELECT $6::int[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY($8::bigint[]) AND j.id = (SELECT $8::bigint[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.attempt = (SELECT $9::int[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($2::bigint[]))),
claimed AS (SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.checkpoint::text AS checkpoint,
       extract(epoch FROM j.expires_at)::float8 AS expires_at, j.cpus, j.memory,
       j.resources::text AS resources,
       extract(epoch FROM j.run_at)::float8 AS run_at
FROM supervisor.claim_keyed($10, $11::text[], $12::int, $13::int,
                            $7, $14::float8, $15::int[],
                            $16::int) AS k,
     LATERAL (SELECT * FROM ONLY supervisor.jobs WHERE id = k.id OFFSET 0) AS j)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ claim_fair
WITH claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest(%(known_batches)s::bigint[], %(known_priorities)s::int[],
                             %(known_run_ats)s::float8[], %(known_ids)s::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT %(after_batch)s::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.state || '' = 'available' AND w.queue = %(queue)s AND w.batch_id = nk.b
                     AND (w.priority, w.run_at, w.id)
                         > (nk.p, to_timestamp(nk.r), nk.i)) THEN nk.b END),
               CASE WHEN gap.b IS NULL THEN nk.p ELSE %(head_priority)s::int END,
               CASE WHEN gap.b IS NULL THEN nk.r ELSE %(head_run_at)s::float8 END,
               CASE WHEN gap.b IS NULL THEN nk.i ELSE 0::bigint END
        FROM batches s
        LEFT JOIN LATERAL (SELECT k.b, k.p, k.r, k.i FROM known k WHERE k.b > s.pos
                           ORDER BY k.b LIMIT 1) AS nk ON true
        CROSS JOIN LATERAL (
            SELECT (SELECT g.batch_id FROM ONLY supervisor.jobs g
                    WHERE g.state || '' = 'available' AND g.queue = %(queue)s
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)
    SELECT turn.id FROM (
        SELECT m.id, m.priority, m.n, batches.b = ANY(%(held_batches)s::bigint[]) AS held
        FROM batches CROSS JOIN LATERAL (
            SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id) AS n
            FROM (SELECT id, priority, run_at FROM ONLY supervisor.jobs
                  WHERE state || '' = 'available' AND queue = %(queue)s AND batch_id = batches.b
                    AND (priority, run_at, id)
                        > (batches.p, to_timestamp(batches.r), batches.i)
                    AND kind = ANY(%(kinds)s::text[]) AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
                  ORDER BY priority, run_at, id
                  LIMIT %(limit)s) AS due) AS m
        WHERE batches.b IS NOT NULL
        UNION ALL
        SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id), false
        FROM (SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = %(queue)s
                AND kind = ANY(%(kinds)s::text[]) AND run_at <= now()
                AND (priority, run_at, id) > (%(start_priority)s::int, to_timestamp(%(start_run_at)s::float8), %(start_id)s::bigint)
      AND (expires_at IS NULL OR expires_at > now())
              ORDER BY priority, run_at, id
              LIMIT %(limit)s) AS head
        WHERE head.batch_id IS NULL) AS turn
    ORDER BY turn.priority, turn.n, turn.held, random()
    LIMIT %(limit)s))
      AND state || '' = 'available' AND queue = %(queue)s
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at,
          batch_id,
          (WITH RECURSIVE known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest(%(known_batches)s::bigint[], %(known_priorities)s::int[],
                             %(known_run_ats)s::float8[], %(known_ids)s::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT %(after_batch)s::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.state || '' = 'available' AND w.queue = %(queue)s AND w.batch_id = nk.b
                     AND (w.priority, w.run_at, w.id)
                         > (nk.p, to_timestamp(nk.r), nk.i)) THEN nk.b END),
               CASE WHEN gap.b IS NULL THEN nk.p ELSE %(head_priority)s::int END,
               CASE WHEN gap.b IS NULL THEN nk.r ELSE %(head_run_at)s::float8 END,
               CASE WHEN gap.b IS NULL THEN nk.i ELSE 0::bigint END
        FROM batches s
        LEFT JOIN LATERAL (SELECT k.b, k.p, k.r, k.i FROM known k WHERE k.b > s.pos
                           ORDER BY k.b LIMIT 1) AS nk ON true
        CROSS JOIN LATERAL (
            SELECT (SELECT g.batch_id FROM ONLY supervisor.jobs g
                    WHERE g.state || '' = 'available' AND g.queue = %(queue)s
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)
           SELECT b FROM batches WHERE b IS NOT NULL LIMIT 1) AS first_batch),
loose_head AS MATERIALIZED (SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = %(queue)s
                AND kind = ANY(%(kinds)s::text[]) AND run_at <= now()
                AND (priority, run_at, id) > (%(start_priority)s::int, to_timestamp(%(start_run_at)s::float8), %(start_id)s::bigint)
      AND (expires_at IS NULL OR expires_at > now())
              ORDER BY priority, run_at, id
              LIMIT %(limit)s),
loose_next AS MATERIALIZED (
    SELECT priority, run_at, id FROM (
        (SELECT priority, run_at, id - 1 AS id, 0 AS o FROM loose_head
         WHERE id <> ALL (ARRAY(SELECT id FROM claimed))
         ORDER BY priority, run_at, id LIMIT 1)
        UNION ALL
        (SELECT priority, run_at, id, 1 FROM loose_head
         ORDER BY priority DESC, run_at DESC, id DESC LIMIT 1)) AS found
    ORDER BY o LIMIT 1)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at, batch_id, first_batch,
       (SELECT priority FROM loose_next) AS loose_priority,
       (SELECT extract(epoch FROM run_at)::float8 FROM loose_next) AS loose_run_at,
       (SELECT id FROM loose_next) AS loose_id,
       false AS done
FROM claimed

-- @@ claim_fair_alone_prepared
WITH claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $1, lease_expires_at = now() + $2 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($3::text[], $4::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $5)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest($6::bigint[], $7::int[],
                             $8::float8[], $9::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT $10::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.state || '' = 'available' AND w.queue = $11 AND w.batch_id = nk.b
                     AND (w.priority, w.run_at, w.id)
                         > (nk.p, to_timestamp(nk.r), nk.i)) THEN nk.b END),
               CASE WHEN gap.b IS NULL THEN nk.p ELSE $12::int END,
               CASE WHEN gap.b IS NULL THEN nk.r ELSE $13::float8 END,
               CASE WHEN gap.b IS NULL THEN nk.i ELSE 0::bigint END
        FROM batches s
        LEFT JOIN LATERAL (SELECT k.b, k.p, k.r, k.i FROM known k WHERE k.b > s.pos
                           ORDER BY k.b LIMIT 1) AS nk ON true
        CROSS JOIN LATERAL (
            SELECT (SELECT g.batch_id FROM ONLY supervisor.jobs g
                    WHERE g.state || '' = 'available' AND g.queue = $11
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)
    SELECT turn.id FROM (
        SELECT m.id, m.priority, m.n, batches.b = ANY($14::bigint[]) AS held
        FROM batches CROSS JOIN LATERAL (
            SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id) AS n
            FROM (SELECT id, priority, run_at FROM ONLY supervisor.jobs
                  WHERE state || '' = 'available' AND queue = $11 AND batch_id = batches.b
                    AND (priority, run_at, id)
                        > (batches.p, to_timestamp(batches.r), batches.i)
                    AND kind = ANY($3::text[]) AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
                  ORDER BY priority, run_at, id
                  LIMIT $15) AS due) AS m
        WHERE batches.b IS NOT NULL
        UNION ALL
        SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id), false
        FROM (SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = $11
                AND kind = ANY($3::text[]) AND run_at <= now()
                AND (priority, run_at, id) > ($16::int, to_timestamp($17::float8), $18::bigint)
      AND (expires_at IS NULL OR expires_at > now())
              ORDER BY priority, run_at, id
              LIMIT $15) AS head
        WHERE head.batch_id IS NULL) AS turn
    ORDER BY turn.priority, turn.n, turn.held, random()
    LIMIT $15))
      AND state || '' = 'available' AND queue = $11
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $11 AND q.paused)
    LIMIT $15
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at,
          batch_id,
          (WITH RECURSIVE known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest($6::bigint[], $7::int[],
                             $8::float8[], $9::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT $10::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.state || '' = 'available' AND w.queue = $11 AND w.batch_id = nk.b
                     AND (w.priority, w.run_at, w.id)
                         > (nk.p, to_timestamp(nk.r), nk.i)) THEN nk.b END),
               CASE WHEN gap.b IS NULL THEN nk.p ELSE $12::int END,
               CASE WHEN gap.b IS NULL THEN nk.r ELSE $13::float8 END,
               CASE WHEN gap.b IS NULL THEN nk.i ELSE 0::bigint END
        FROM batches s
        LEFT JOIN LATERAL (SELECT k.b, k.p, k.r, k.i FROM known k WHERE k.b > s.pos
                           ORDER BY k.b LIMIT 1) AS nk ON true
        CROSS JOIN LATERAL (
            SELECT (SELECT g.batch_id FROM ONLY supervisor.jobs g
                    WHERE g.state || '' = 'available' AND g.queue = $11
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)
           SELECT b FROM batches WHERE b IS NOT NULL LIMIT 1) AS first_batch),
loose_head AS MATERIALIZED (SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = $11
                AND kind = ANY($3::text[]) AND run_at <= now()
                AND (priority, run_at, id) > ($16::int, to_timestamp($17::float8), $18::bigint)
      AND (expires_at IS NULL OR expires_at > now())
              ORDER BY priority, run_at, id
              LIMIT $15),
loose_next AS MATERIALIZED (
    SELECT priority, run_at, id FROM (
        (SELECT priority, run_at, id - 1 AS id, 0 AS o FROM loose_head
         WHERE id <> ALL (ARRAY(SELECT id FROM claimed))
         ORDER BY priority, run_at, id LIMIT 1)
        UNION ALL
        (SELECT priority, run_at, id, 1 FROM loose_head
         ORDER BY priority DESC, run_at DESC, id DESC LIMIT 1)) AS found
    ORDER BY o LIMIT 1)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at, batch_id, first_batch,
       (SELECT priority FROM loose_next) AS loose_priority,
       (SELECT extract(epoch FROM run_at)::float8 FROM loose_next) AS loose_run_at,
       (SELECT id FROM loose_next) AS loose_id,
       false AS done
FROM claimed

-- @@ complete_and_claim_fair_prepared
WITH done AS (UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = ((SELECT $1::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1)) -> 0, usage = nullif((SELECT $3::jsonb) -> (width_bucket(j.id, (SELECT $2::bigint[])) - 1), 'null'),
    output = (SELECT $4::jsonb) ->> (width_bucket(j.id, (SELECT $2::bigint[])) - 1),
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{done}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce((SELECT $5::float8[])[width_bucket(j.id, (SELECT $2::bigint[]))], 0) * interval '1 second')
WHERE j.id = ANY($2::bigint[]) AND j.id = (SELECT $2::bigint[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.attempt = (SELECT $6::int[])[width_bucket(j.id, (SELECT $2::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C"
RETURNING j.id),
started AS (UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE j.id = ANY($8::bigint[]) AND j.id = (SELECT $8::bigint[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.attempt = (SELECT $9::int[])[width_bucket(j.id, (SELECT $8::bigint[]))] AND j.lease_owner = $7 AND j.state = 'running' COLLATE "C" AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($2::bigint[]))),
claimed AS (UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $7, lease_expires_at = now() + $10 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($11::text[], $12::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $13)
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest($14::bigint[], $15::int[],
                             $16::float8[], $17::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT $18::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.state || '' = 'available' AND w.queue = $19 AND w.batch_id = nk.b
                     AND (w.priority, w.run_at, w.id)
                         > (nk.p, to_timestamp(nk.r), nk.i)) THEN nk.b END),
               CASE WHEN gap.b IS NULL THEN nk.p ELSE $20::int END,
               CASE WHEN gap.b IS NULL THEN nk.r ELSE $21::float8 END,
               CASE WHEN gap.b IS NULL THEN nk.i ELSE 0::bigint END
        FROM batches s
        LEFT JOIN LATERAL (SELECT k.b, k.p, k.r, k.i FROM known k WHERE k.b > s.pos
                           ORDER BY k.b LIMIT 1) AS nk ON true
        CROSS JOIN LATERAL (
            SELECT (SELECT g.batch_id FROM ONLY supervisor.jobs g
                    WHERE g.state || '' = 'available' AND g.queue = $19
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)
    SELECT turn.id FROM (
        SELECT m.id, m.priority, m.n, batches.b = ANY($22::bigint[]) AS held
        FROM batches CROSS JOIN LATERAL (
            SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id) AS n
            FROM (SELECT id, priority, run_at FROM ONLY supervisor.jobs
                  WHERE state || '' = 'available' AND queue = $19 AND batch_id = batches.b
                    AND (priority, run_at, id)
                        > (batches.p, to_timestamp(batches.r), batches.i)
                    AND kind = ANY($11::text[]) AND run_at <= now()
      AND (expires_at IS NULL OR expires_at > now())
                  ORDER BY priority, run_at, id
                  LIMIT $23) AS due) AS m
        WHERE batches.b IS NOT NULL
        UNION ALL
        SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id), false
        FROM (SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = $19
                AND kind = ANY($11::text[]) AND run_at <= now()
                AND (priority, run_at, id) > ($24::int, to_timestamp($25::float8), $26::bigint)
      AND (expires_at IS NULL OR expires_at > now())
              ORDER BY priority, run_at, id
              LIMIT $23) AS head
        WHERE head.batch_id IS NULL) AS turn
    ORDER BY turn.priority, turn.n, turn.held, random()
    LIMIT $23))
      AND state || '' = 'available' AND queue = $19
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $19 AND q.paused)
    LIMIT $23
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at,
          batch_id,
          (WITH RECURSIVE known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest($14::bigint[], $15::int[],
                             $16::float8[], $17::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT $18::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.state || '' = 'available' AND w.queue = $19 AND w.batch_id = nk.b
                     AND (w.priority, w.run_at, w.id)
                         > (nk.p, to_timestamp(nk.r), nk.i)) THEN nk.b END),
               CASE WHEN gap.b IS NULL THEN nk.p ELSE $20::int END,
               CASE WHEN gap.b IS NULL THEN nk.r ELSE $21::float8 END,
               CASE WHEN gap.b IS NULL THEN nk.i ELSE 0::bigint END
        FROM batches s
        LEFT JOIN LATERAL (SELECT k.b, k.p, k.r, k.i FROM known k WHERE k.b > s.pos
                           ORDER BY k.b LIMIT 1) AS nk ON true
        CROSS JOIN LATERAL (
            SELECT (SELECT g.batch_id FROM ONLY supervisor.jobs g
                    WHERE g.state || '' = 'available' AND g.queue = $19
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)
           SELECT b FROM batches WHERE b IS NOT NULL LIMIT 1) AS first_batch),
loose_head AS MATERIALIZED (SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = $19
                AND kind = ANY($11::text[]) AND run_at <= now()
                AND (priority, run_at, id) > ($24::int, to_timestamp($25::float8), $26::bigint)
      AND (expires_at IS NULL OR expires_at > now())
              ORDER BY priority, run_at, id
              LIMIT $23),
loose_next AS MATERIALIZED (
    SELECT priority, run_at, id FROM (
        (SELECT priority, run_at, id - 1 AS id, 0 AS o FROM loose_head
         WHERE id <> ALL (ARRAY(SELECT id FROM claimed))
         ORDER BY priority, run_at, id LIMIT 1)
        UNION ALL
        (SELECT priority, run_at, id, 1 FROM loose_head
         ORDER BY priority DESC, run_at DESC, id DESC LIMIT 1)) AS found
    ORDER BY o LIMIT 1)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, checkpoint, expires_at, cpus, memory, resources, run_at, batch_id, first_batch,
       (SELECT priority FROM loose_next) AS loose_priority,
       (SELECT extract(epoch FROM run_at)::float8 FROM loose_next) AS loose_run_at,
       (SELECT id FROM loose_next) AS loose_id,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done
