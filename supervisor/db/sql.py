"""The SQL of the store: every statement the parent runs against the queue.

Kept apart from ``supervisor.db.store`` (which binds parameters and reads results) so each
statement can be read, and reviewed for its plan, in one place.
"""

from supervisor.db.nonblocking import Prepared

# Kept in this exact form (DESIGN): the CTE-join claim fell to a full scan after
# ANALYZE, while id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP LOCKED)) keeps the index
# plan. The LIMIT lives inside the ARRAY, so the planner cannot drop it. trace_context
# (the producer's, issue 15) goes to the child as the text it is, like the args.
CLAIM = """
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
          trace_context::text AS trace_context
"""

# The fence every write for a running job shares; u is the unnest of the batch. The
# planner reaches j through the partial index on running rows (the jobs in flight) or
# through the primary key (the redundant "j.id = ANY"), whichever is cheaper. These
# statements are planned per execution (prepare=False): a prepared generic plan cannot
# see the batch size and chose a nested loop that rescanned the batch for every running
# row (10x slower at batch 512).
# Claims carrying at most this many writes run as prepared statements all the same: a
# generic plan guesses ten rows for a batch, as good as a custom plan for a few, and it
# saves the parse and planning (about 1 ms of server CPU) of the claim after each job.
CACHED_PLAN_BATCH = 16
_FENCE = ("j.id = ANY(%(ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt "
          "AND j.lease_owner = %(owner)s AND j.state = 'running'")

_ERROR_ENTRY = """jsonb_build_array(jsonb_build_object(
    'attempt', j.attempt, 'kind', u.kind, 'message', u.message, 'traceback', u.traceback,
    'at', now(), 'supervisor', %(owner)s::text))"""

COMPLETE = f"""
UPDATE supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result::jsonb,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (the start is left to the completion in
    -- the same statement, see _STARTED_CARRIED) still says it was attempted
    attempted_at = coalesce(j.attempted_at, now())
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(results)s::text[])
     AS u(id, attempt, result)
WHERE {_FENCE}
RETURNING j.id
"""

# A claim that carries the completions of the jobs that just finished: one round trip
# and one commit (one WAL flush) instead of two, which is what bounds short jobs.
# Jobs a child started: their attempt now counts even if this supervisor dies (rescue
# gives back a never-started job without spending its attempt).
STARTED = """
UPDATE supervisor.jobs AS j SET attempted_at = now()
FROM unnest(%(started_ids)s::bigint[], %(started_attempts)s::int[]) AS u(id, attempt)
WHERE j.id = ANY(%(started_ids)s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt
  AND j.lease_owner = %(owner)s AND j.state = 'running' AND j.attempted_at IS NULL
"""

# Carried on a claim next to completions: a row must not be updated twice in one
# statement (which of the two updates wins is unspecified), so a job completed in the same
# statement is left to its completion.
_STARTED_CARRIED = STARTED.strip() + "\n  AND NOT (j.id = ANY(%(ids)s::bigint[]))"

COMPLETE_AND_CLAIM = f"""
WITH done AS ({COMPLETE.strip()}),
started AS ({_STARTED_CARRIED}),
claimed AS ({CLAIM.strip()})
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context,
       false
FROM claimed
UNION ALL
SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, true FROM done
"""

# The same statement for the non-blocking connection (libpq's $n placeholders).
COMPLETE_AND_CLAIM_NONBLOCKING = Prepared(COMPLETE_AND_CLAIM)

# Priority aging (a queue's ``aging`` seconds, when > 0): a job that has waited ``aging``
# seconds past its run_at counts one priority step more urgent, two after twice that, and
# so on. The stored priority is never rewritten (the claim index stays as it is): the
# claim computes the effective priority. A statement of its own, so a queue without aging
# runs CLAIM unchanged (a shared statement with a branch cut by a one-time filter cost a
# quarter of a millisecond per claim in planning and executor set-up).
#
# The jobs that can come first by effective priority are among (a) the first LIMIT in
# the index's own order (a job not yet aged is never ahead of one before it in that
# order) and (b) for each priority level present, found by a loose index scan (one probe
# per level), its LIMIT oldest jobs already aged a step (within a level, older is never
# less urgent). The LIMIT best of those candidates are locked through the primary key.
_AGED_CANDIDATES = """
WITH RECURSIVE levels(priority) AS (
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
    LIMIT %(limit)s) AS aged
"""

_CLAIM_WHERE = CLAIM[CLAIM.index("WHERE id = ANY(ARRAY("):CLAIM.index("RETURNING")]
CLAIM_AGED = CLAIM.replace(_CLAIM_WHERE, f"""WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE id = ANY(ARRAY({_AGED_CANDIDATES.strip()}))
      AND state = 'available' AND queue = %(queue)s AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / %(aging)s::float8),
             run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
""")
COMPLETE_AND_CLAIM_AGED = COMPLETE_AND_CLAIM.replace(CLAIM.strip(), CLAIM_AGED.strip())
COMPLETE_AND_CLAIM_AGED_NONBLOCKING = Prepared(COMPLETE_AND_CLAIM_AGED)


# The claim of a queue with a per-key limit (``supervisor queues limit
# --per-key-max-running``): the schema's claim_keyed() serialises these claims per queue
# and skips keys at their limit (see shared/schema/0007_limits.sql). Queues without that
# limit never reach it: their claim is CLAIM above, unchanged. Aging is not applied here.
# The function (schema 0007) predates the trace_context column (0008): the column is read
# here, by primary key, for the few rows a claim returns.
CLAIM_KEYED = """
SELECT k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args,
       k.wait, (SELECT j.trace_context::text FROM supervisor.jobs j WHERE j.id = k.id)
               AS trace_context
FROM supervisor.claim_keyed(%(queue)s, %(kinds)s::text[], %(limit)s::int, %(per_key)s::int,
                            %(owner)s, %(ttl)s::float8, %(kind_attempts)s::int[],
                            %(default_attempts)s::int) AS k
"""
COMPLETE_AND_CLAIM_KEYED = COMPLETE_AND_CLAIM.replace(CLAIM.strip(), CLAIM_KEYED.strip())
COMPLETE_AND_CLAIM_KEYED_NONBLOCKING = Prepared(COMPLETE_AND_CLAIM_KEYED)


def _claim_alone(claim: str) -> Prepared:
    """A claim that carries no writes, in COMPLETE_AND_CLAIM's row shape. Its plan
    may be cached (the parent prepares it): no batch arrays, so no plan that fits one
    batch size and not another."""
    return Prepared(f"""
WITH claimed AS ({claim.strip()})
SELECT id, kind, queue, attempt, max_attempts, priority, timeout, args, wait, trace_context,
       false
FROM claimed
""")


CLAIM_ALONE_NONBLOCKING = _claim_alone(CLAIM)
CLAIM_AGED_ALONE_NONBLOCKING = _claim_alone(CLAIM_AGED)
CLAIM_KEYED_ALONE_NONBLOCKING = _claim_alone(CLAIM_KEYED)


def claim_alone_statement(aging: float, per_key: int | None = None) -> Prepared:
    """The non-blocking claim that carries no writes, for a queue's ``aging`` or
    per-key limit (the rows of ``claim_statements``' third statement)."""
    if per_key is not None:
        return CLAIM_KEYED_ALONE_NONBLOCKING
    if aging > 0:
        return CLAIM_AGED_ALONE_NONBLOCKING
    return CLAIM_ALONE_NONBLOCKING


def claim_statements(aging: float, per_key: int | None = None) -> tuple[str, str, Prepared]:
    """(claim, complete-and-claim, its non-blocking form) for a queue's ``aging``, or for
    a queue whose jobs run at most ``per_key`` at once per concurrency key."""
    if per_key is not None:
        return CLAIM_KEYED, COMPLETE_AND_CLAIM_KEYED, COMPLETE_AND_CLAIM_KEYED_NONBLOCKING
    if aging > 0:
        return CLAIM_AGED, COMPLETE_AND_CLAIM_AGED, COMPLETE_AND_CLAIM_AGED_NONBLOCKING
    return CLAIM, COMPLETE_AND_CLAIM, COMPLETE_AND_CLAIM_NONBLOCKING

FAIL = f"""
UPDATE supervisor.jobs AS j
SET state = CASE WHEN u.terminal OR j.attempt >= j.max_attempts
                 THEN 'discarded' ELSE 'retryable' END,
    run_at = CASE WHEN u.terminal OR j.attempt >= j.max_attempts
                  THEN j.run_at ELSE now() + u.delay * interval '1 second' END,
    finished_at = CASE WHEN u.terminal OR j.attempt >= j.max_attempts THEN now() END,
    errors = j.errors || {_ERROR_ENTRY},
    lease_owner = NULL, lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(kinds)s::text[], %(messages)s::text[],
            %(tracebacks)s::text[], %(delays)s::float8[], %(terminal)s::bool[])
     AS u(id, attempt, kind, message, traceback, delay, terminal)
WHERE {_FENCE}
RETURNING j.id
"""

RELEASE = f"""
UPDATE supervisor.jobs AS j
SET state = 'available', attempt = j.attempt - 1, lease_owner = NULL,
    lease_expires_at = NULL, heartbeat_at = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS u(id, attempt)
WHERE {_FENCE}
RETURNING j.id
"""

# A handler's workers.Snooze(delay): due again after the delay, its attempt unspent and
# no errors entry (it did not fail).
SNOOZE = f"""
UPDATE supervisor.jobs AS j
SET state = 'scheduled', attempt = j.attempt - 1,
    run_at = now() + u.delay * interval '1 second',
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(delays)s::float8[])
     AS u(id, attempt, delay)
WHERE {_FENCE}
RETURNING j.id
"""

INTERRUPT = f"""
UPDATE supervisor.jobs AS j
SET state = 'available', attempt = j.attempt - 1, errors = j.errors || {_ERROR_ENTRY},
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(kinds)s::text[], %(messages)s::text[],
            %(tracebacks)s::text[]) AS u(id, attempt, kind, message, traceback)
WHERE {_FENCE}
RETURNING j.id
"""

RENEW = f"""
UPDATE supervisor.jobs AS j
SET lease_expires_at = now() + %(ttl)s * interval '1 second', heartbeat_at = now(),
    progress = COALESCE(u.progress::jsonb, j.progress)
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(progress)s::text[])
     AS u(id, attempt, progress)
WHERE {_FENCE}
RETURNING j.id
"""

PROMOTE = """
UPDATE supervisor.jobs SET state = 'available'
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
  AND state IN ('scheduled', 'retryable')
"""

# The old lease_owner is read in SET (which sees the row before the update) and comes
# back as the last errors entry's "supervisor", so no self-join is needed to return it.
RESCUE = """
UPDATE supervisor.jobs AS j
SET state = CASE WHEN o.unstarted THEN 'available'
                 WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'retryable' END,
    attempt = CASE WHEN o.unstarted THEN j.attempt - 1 ELSE j.attempt END,
    run_at = CASE WHEN o.unstarted OR j.attempt >= j.max_attempts THEN j.run_at
                  ELSE now() + least(%(base)s * power(%(factor)s, least(j.attempt - 1, 64)),
                                     %(cap)s)
                             * (1 - %(jitter)s * random()) * interval '1 second' END,
    finished_at = CASE WHEN NOT o.unstarted AND j.attempt >= j.max_attempts THEN now() END,
    errors = CASE WHEN o.unstarted THEN j.errors ELSE j.errors || jsonb_build_array(
        jsonb_build_object(
        'attempt', j.attempt, 'kind', 'lease_expired',
        'message', 'lease of supervisor ' || coalesce(o.lost, '?')
                   || ' expired at ' || j.lease_expires_at::text,
        'traceback', NULL, 'at', now(), 'supervisor', o.lost)) END,
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
FROM (
    -- A job its supervisor had claimed but not started (attempted_at is set at the start)
    -- goes back without spending the attempt: it never ran.
    SELECT id, lease_owner AS lost, attempted_at IS NULL AS unstarted
    FROM supervisor.jobs
    WHERE id = ANY(ARRAY(
        SELECT id FROM supervisor.jobs
        WHERE state = 'running' AND lease_expires_at < now()
          -- Right after the server restarted, every lease looks expired; its owners are
          -- reconnecting to renew them. Only a lease that stays expired past that counts.
          AND pg_postmaster_start_time() < now() - %(ttl)s * interval '1 second'
        ORDER BY lease_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED))
) AS o
WHERE j.id = o.id AND j.state = 'running' AND j.lease_expires_at < now()
RETURNING j.id, o.lost, o.unstarted
"""

QUEUE_COUNTS = """
SELECT queue, state, count(*), count(*) FILTER (WHERE run_at <= now())
FROM supervisor.jobs
WHERE queue = ANY(%(queues)s::text[])
  AND state IN ('available', 'scheduled', 'retryable', 'running')
GROUP BY queue, state
"""

# One index probe per queue (the partial index on available jobs), so asking costs the
# same whether a queue holds ten jobs or ten million.
QUEUES_WITH_WORK = """
SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
WHERE EXISTS (
    SELECT 1 FROM supervisor.jobs j
    WHERE j.state = 'available' AND j.queue = q.name AND j.run_at <= now()
      AND j.kind = ANY(%(kinds)s::text[])
) AND NOT EXISTS (SELECT 1 FROM supervisor.queues p WHERE p.name = q.name AND p.paused)
"""

HAS_DUE_WORK = """
SELECT EXISTS (
    SELECT 1 FROM supervisor.jobs j
    WHERE j.state = 'available' AND j.queue = ANY(%(queues)s::text[])
      AND j.kind = ANY(%(kinds)s::text[]) AND j.run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = j.queue AND q.paused)
) OR EXISTS (
    SELECT 1 FROM supervisor.jobs j
    WHERE j.state IN ('scheduled', 'retryable')
      AND j.run_at <= now() + %(horizon)s * interval '1 second'
      AND j.queue = ANY(%(queues)s::text[]) AND j.kind = ANY(%(kinds)s::text[])
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = j.queue AND q.paused)
)
"""

# What a burst leaves for later: jobs due past its horizon.
LEFT_FOR_LATER = """
SELECT count(*), min(run_at) FROM supervisor.jobs
WHERE state IN ('scheduled', 'retryable') AND queue = ANY(%(queues)s::text[])
  AND kind = ANY(%(kinds)s::text[])
"""

# Jobs waiting in these queues whose kind no loaded handler runs, per kind (a burst run
# says so as it ends, rather than "no more work").
UNHANDLED_WAITING = """
SELECT kind, count(*) FROM supervisor.jobs
WHERE state IN ('available', 'scheduled', 'retryable') AND queue = ANY(%(queues)s::text[])
  AND kind <> ALL(%(kinds)s::text[])
GROUP BY kind ORDER BY count(*) DESC, kind
"""

# Seconds until the earliest scheduled or retrying job of these queues is due (negative:
# already due; NULL: none), so an idle supervisor wakes at that moment, not at its poll.
NEXT_DUE = """
SELECT extract(epoch FROM min(run_at) - now())::float8
FROM supervisor.jobs
WHERE state IN ('scheduled', 'retryable') AND queue = ANY(%(queues)s::text[])
  AND kind = ANY(%(kinds)s::text[])
"""

# Which of these queues are paused now.
PAUSED = """
SELECT name FROM supervisor.queues WHERE paused AND name = ANY(%(queues)s::text[])
"""

# Jobs running under this supervisor's name that it does not hold: the answer to a
# claim was lost with its connection, so nobody will run them. They go back at once,
# the attempt not counted (they never started).
RECONCILE = """
UPDATE supervisor.jobs
SET state = 'available', attempt = attempt - 1, lease_owner = NULL,
    lease_expires_at = NULL, heartbeat_at = NULL
WHERE state = 'running' AND lease_owner = %(owner)s AND NOT (id = ANY(%(held)s::bigint[]))
RETURNING id
"""

# -- maintenance ----------------------------------------------------------------------

BEAT = """
INSERT INTO supervisor.supervisors (id, host, pid, queues, children, busy, info)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(children)s, %(busy)s, %(info)s)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = now(), children = EXCLUDED.children, busy = EXCLUDED.busy,
    queues = EXCLUDED.queues, info = EXCLUDED.info
"""

TRY_LEAD = "SELECT pg_try_advisory_xact_lock(%(key)s)"

PRUNE = """
DELETE FROM supervisor.jobs
WHERE id = ANY(ARRAY(
    SELECT id FROM supervisor.jobs
    WHERE state IN ('completed', 'discarded', 'cancelled')
      AND finished_at < now() - %(retention)s * interval '1 second'
      AND (state <> 'discarded' OR finished_at < now() - %(discarded)s * interval '1 second')
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED))
"""

DROP_STALE = """
DELETE FROM supervisor.supervisors
WHERE heartbeat_at < now() - %(stale)s * interval '1 second'
"""

LEAVE = "DELETE FROM supervisor.supervisors WHERE id = %(id)s"
