-- The claim statements as they were before the claim builder (recorded from the
-- str.replace variants of supervisor/db/sql.py); tests/test_claim_sql.py checks the
-- builder still produces each of them, whitespace aside. Do not edit by hand.
-- One change since the recording: the flag of the carrying and alone forms is named
-- (false AS done), so their rows are read by column name; and a completion sets
-- attempted_at when its start was never written (issue 30: a job of about 0.1 s could
-- end completed with attempted_at NULL). Issue 27 (0017): every form also returns the
-- reservation columns cpus and memory (the keyed form reads them by primary key, with
-- trace_context, through a join instead of a scalar subquery).

-- @@ claim
UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, cpus, memory

-- @@ claim_aged
UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM supervisor.jobs
     WHERE state = 'available' AND queue = %(queue)s ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = %(queue)s AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %(limit)s) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND priority = levels.priority
      AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() - %(aging)s::float8 * interval '1 second'
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
          trace_context::text AS trace_context, cpus, memory

-- @@ claim_keyed
SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.cpus, j.memory
FROM supervisor.claim_keyed(%(queue)s, %(kinds)s::text[], %(limit)s::int, %(per_key)s::int,
                            %(owner)s, %(ttl)s::float8, %(kind_attempts)s::int[],
                            %(default_attempts)s::int) AS k
JOIN supervisor.jobs j ON j.id = k.id

-- @@ complete_and_claim
WITH done AS (UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(results)s::text[])
     AS u(id, attempt, result)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt AND j.lease_owner = %(owner)s AND j.state = 'running'
RETURNING j.id),
started AS (UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest(%(started_ids)s::bigint[], %(started_attempts)s::int[]) AS u(id, attempt)
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = %(owner)s AND j.state = 'running' AND j.attempted_at IS NULL
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS (UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, cpus, memory)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_aged
WITH done AS (UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(results)s::text[])
     AS u(id, attempt, result)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt AND j.lease_owner = %(owner)s AND j.state = 'running'
RETURNING j.id),
started AS (UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest(%(started_ids)s::bigint[], %(started_attempts)s::int[]) AS u(id, attempt)
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = %(owner)s AND j.state = 'running' AND j.attempted_at IS NULL
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS (UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM supervisor.jobs
     WHERE state = 'available' AND queue = %(queue)s ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = %(queue)s AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %(limit)s) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND priority = levels.priority
      AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() - %(aging)s::float8 * interval '1 second'
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
          trace_context::text AS trace_context, cpus, memory)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_keyed
WITH done AS (UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(results)s::text[])
     AS u(id, attempt, result)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt AND j.lease_owner = %(owner)s AND j.state = 'running'
RETURNING j.id),
started AS (UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest(%(started_ids)s::bigint[], %(started_attempts)s::int[]) AS u(id, attempt)
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = %(owner)s AND j.state = 'running' AND j.attempted_at IS NULL
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS (SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.cpus, j.memory
FROM supervisor.claim_keyed(%(queue)s, %(kinds)s::text[], %(limit)s::int, %(per_key)s::int,
                            %(owner)s, %(ttl)s::float8, %(kind_attempts)s::int[],
                            %(default_attempts)s::int) AS k
JOIN supervisor.jobs j ON j.id = k.id)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ claim_alone_prepared
WITH claimed AS (UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $1, lease_expires_at = now() + $2 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($3::text[], $4::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $5)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = $6 AND kind = ANY($3::text[])
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $6 AND q.paused)
    ORDER BY priority, run_at, id
    LIMIT $7
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, cpus, memory)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed

-- @@ claim_aged_alone_prepared
WITH claimed AS (UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $1, lease_expires_at = now() + $2 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($3::text[], $4::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $5)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM supervisor.jobs
     WHERE state = 'available' AND queue = $6 ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = $6 AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = $6 AND kind = ANY($3::text[])
      AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT $7) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = $6 AND priority = levels.priority
      AND kind = ANY($3::text[])
      AND run_at <= now() - $8::float8 * interval '1 second'
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
          trace_context::text AS trace_context, cpus, memory)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed

-- @@ claim_keyed_alone_prepared
WITH claimed AS (SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.cpus, j.memory
FROM supervisor.claim_keyed($1, $2::text[], $3::int, $4::int,
                            $5, $6::float8, $7::int[],
                            $8::int) AS k
JOIN supervisor.jobs j ON j.id = k.id)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed

-- @@ complete_and_claim_prepared
WITH done AS (UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest($1::bigint[], $2::int[], $3::text[])
     AS u(id, attempt, result)
WHERE j.id = ANY($1::bigint[]) AND j.id = u.id AND j.attempt = u.attempt AND j.lease_owner = $4 AND j.state = 'running'
RETURNING j.id),
started AS (UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest($5::bigint[], $6::int[]) AS u(id, attempt)
WHERE j.id = ANY($5::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = $4 AND j.state = 'running' AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($1::bigint[]))),
claimed AS (UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $4, lease_expires_at = now() + $7 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($8::text[], $9::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $10)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = $11 AND kind = ANY($8::text[])
      AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $11 AND q.paused)
    ORDER BY priority, run_at, id
    LIMIT $12
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, cpus, memory)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_aged_prepared
WITH done AS (UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest($1::bigint[], $2::int[], $3::text[])
     AS u(id, attempt, result)
WHERE j.id = ANY($1::bigint[]) AND j.id = u.id AND j.attempt = u.attempt AND j.lease_owner = $4 AND j.state = 'running'
RETURNING j.id),
started AS (UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest($5::bigint[], $6::int[]) AS u(id, attempt)
WHERE j.id = ANY($5::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = $4 AND j.state = 'running' AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($1::bigint[]))),
claimed AS (UPDATE supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = $4, lease_expires_at = now() + $7 * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest($8::text[], $9::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), $10)
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM supervisor.jobs
     WHERE state = 'available' AND queue = $11 ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = $11 AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL)
SELECT head.id FROM (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = $11 AND kind = ANY($8::text[])
      AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT $12) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM supervisor.jobs
    WHERE state = 'available' AND queue = $11 AND priority = levels.priority
      AND kind = ANY($8::text[])
      AND run_at <= now() - $13::float8 * interval '1 second'
    ORDER BY run_at, id
    LIMIT $12) AS aged))
      AND state = 'available' AND queue = $11 AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = $11 AND q.paused)
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / $13::float8),
             run_at, id
    LIMIT $12
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, cpus, memory)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done

-- @@ complete_and_claim_keyed_prepared
WITH done AS (UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest($1::bigint[], $2::int[], $3::text[])
     AS u(id, attempt, result)
WHERE j.id = ANY($1::bigint[]) AND j.id = u.id AND j.attempt = u.attempt AND j.lease_owner = $4 AND j.state = 'running'
RETURNING j.id),
started AS (UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest($5::bigint[], $6::int[]) AS u(id, attempt)
WHERE j.id = ANY($5::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = $4 AND j.state = 'running' AND j.attempted_at IS NULL
  AND NOT (j.id = ANY($1::bigint[]))),
claimed AS (SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, j.trace_context::text AS trace_context, j.cpus, j.memory
FROM supervisor.claim_keyed($7, $8::text[], $9::int, $10::int,
                            $4, $11::float8, $12::int[],
                            $13::int) AS k
JOIN supervisor.jobs j ON j.id = k.id)
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context, cpus, memory,
       false AS done
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done
