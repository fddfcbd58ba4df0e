"""The SQL of the store: every statement the parent runs against the queue.

Kept apart from ``supervisor.db.store`` (which binds parameters and reads results) so each
statement can be read, and reviewed for its plan, in one place. The claim is composed
from parts of its own, per variant, in ``supervisor.db.claim``.
"""

import re

from shared.live_sql import live_jobs

# The fence every write for a running job shares. j is reached through the primary key
# by the batch's ids ("Index Cond: id = ANY(...)"), and each row's own values (u.attempt,
# u.result, ...) are read from the batch's arrays at its place among them (``_by_place``):
# no join, so the statement reads the batch's entries and nothing else, whatever the
# planner believes of the table or of the batch's size. Two earlier forms failed under a
# held horizon (issue 40), where a VACUUM counts a few live rows among a million dead
# versions and leaves the table's estimate at about one row:
# - joined to the unnest of the batch alone ("j.id = u.id"), a write planned before the
#   next ANALYZE read the whole table or its whole primary key (a carrying claim on the
#   loop's connection: two scans, 2.2 million entries, 400 ms);
# - reached by the ids and joined to the unnest ("j.id + 0 = u.id"), the fence's filters
#   made the planner expect a row or two from j and test each against every row of the
#   batch (a nested loop: 90,000 pairs, 45 ms a carrying claim of 300 completions
#   against 6, and no-op drains at half their rate).
# Never through the partial index on running rows (jobs_lease_idx), which the planner
# joined to the primary key in a BitmapAnd: a bitmap scan of that index reads every
# entry, and while the MVCC horizon is held it keeps one for each job run since (issue
# 40: about 12,000 read per completion batch after 90 s at 500 jobs/s). The state test
# compares in the "C" collation so it does not match the index's predicate; equality of
# text is bytewise in every deterministic collation, so it means the same.
_RUNNING = "j.state = 'running' COLLATE \"C\""


def _by_place(statement: str, ids: str, fields: dict[str, str]) -> str:
    """``statement``, whose ``u.<name>`` stand for row j's values in its batch, with each
    read by ``fields[name]``: an array parameter's element at j's place among the
    batch's ids (the array parameter ``ids``), or a template with ``{at}`` for that
    place. The place is found by binary search (``width_bucket``), so the ids must come
    sorted (``supervisor.db.records.in_id_order``) and every array in their order. The
    place's own id is tested too (``u.id``): a batch sent unsorted is fenced off, and
    logged as such, rather than written to the wrong rows. Reading an element of an
    array of text, or of one with NULLs, walks the array from its start (a batch of 600
    completions took 39 ms instead of 7): such values come as JSON arrays
    (``supervisor.db.attempt_cost``) unless the batch is always small."""
    # Each parameter inside a sub-SELECT, evaluated once per statement: psycopg sends a
    # list of small ints as int2[], and the cast to bigint[] written beside it would be
    # made again for every row (600 rows: 13 us a row for one width_bucket).
    place = f"width_bucket(j.id, (SELECT %({ids})s::bigint[]))"
    fields = {"id": f"%({ids})s::bigint[]", **fields}

    def read(match: re.Match) -> str:
        field = fields[match.group(1)]
        return field.format(at=place) if "{at}" in field else f"(SELECT {field})[{place}]"
    return re.sub(r"\bu\.(\w+)", read, statement)


def _fence(ids: str = "ids") -> str:
    """The fence of a write whose batch's ids are the parameter ``ids`` (``_by_place``)."""
    return (f"j.id = ANY(%({ids})s::bigint[]) AND j.id = u.id AND j.attempt = u.attempt "
            f"AND j.lease_owner = %(owner)s AND {_RUNNING}")


_FENCE = _fence()
_ATTEMPTS = {"attempt": "%(attempts)s::int[]"}

_ERROR_ENTRY = """jsonb_build_array(jsonb_build_object(
    'attempt', j.attempt, 'kind', u.kind, 'message', u.message, 'traceback', u.traceback,
    'at', now(), 'supervisor', %(owner)s::text))"""

# An attempt's usage arrives as three numeric arrays (NULL: none), cheap to send, and is
# built into the stored object here: a text array of JSON costs the parent ~7 us a job
# to escape (its quotes and commas), numbers as text ~2 us, numbers in binary (%b) ~0.8.
_USAGE = """CASE WHEN u.cpu IS NOT NULL THEN jsonb_build_object(
    'cpu_seconds', u.cpu, 'wall_seconds', u.wall, 'max_rss_bytes', u.rss::bigint) END"""
_USAGE_ARRAYS = "%(cpus)b::float8[], %(walls)b::float8[], %(rss)b::float8[], %(outputs)s::text[]"

COMPLETE = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j
SET state = 'completed', finished_at = now(), result = u.result, usage = u.usage,
    output = u.output,
    -- a completed job's progress is final: done = total (not the last report's 0.05)
    progress = CASE WHEN jsonb_typeof(j.progress -> 'total') = 'number'
                    THEN jsonb_set(j.progress, '{{done}}', j.progress -> 'total')
                    ELSE j.progress END,
    lease_owner = NULL, lease_expires_at = NULL,
    -- a job done before its start was written (starts are held back so that a short
    -- job's completion carries its start: outbox.START_HOLD) started "ran" seconds ago
    attempted_at = coalesce(j.attempted_at, now() - coalesce(u.ran, 0) * interval '1 second')
WHERE {_FENCE}
RETURNING j.id
""", "ids", {
    **_ATTEMPTS, "ran": "%(ran)s::float8[]",
    # JSON arrays, an element a job (supervisor.db.attempt_cost.completion_params)
    "result": "((SELECT %(results_json)s::jsonb) -> ({at} - 1)) -> 0",
    "usage": "nullif((SELECT %(usages_json)s::jsonb) -> ({at} - 1), 'null')",
    "output": "(SELECT %(outputs_json)s::jsonb) ->> ({at} - 1)"})

# Jobs a child started: their attempt now counts even if this supervisor dies (rescue
# gives back a never-started job without spending its attempt).
STARTED = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j SET attempted_at = now()
WHERE {_fence("started_ids")} AND j.attempted_at IS NULL
""", "started_ids", {"attempt": "%(started_attempts)s::int[]"})

# Every write that adds an errors entry passes the whole through supervisor.capped_errors
# (schema 0022): a job that fails often with long messages keeps its first and last
# attempts' text and a bounded total, so the error search index can always take the row.
# A failed attempt. Its entry also says what it cost and printed, when the child said so
# (an attempt the parent ended has neither): keys left out rather than null.
# u.poison: this crash has the signature (shared.jobs.crash_signature) of the job's last
# poison_after - 1 errors entries too: discarded at once, with a "poison" entry after
# this attempt's own. Each crash entry carries its signature, so the next attempt
# compares with it; entries of other failures have none.
_FAILED_ENTRY = f"""jsonb_build_array(jsonb_build_object(
    'attempt', j.attempt, 'kind', u.kind, 'message', u.message, 'traceback', u.traceback,
    'at', now(), 'supervisor', %(owner)s::text)
    || CASE WHEN u.signature IS NULL THEN '{{}}'::jsonb
            ELSE jsonb_build_object('signature', u.signature) END
    || jsonb_strip_nulls(jsonb_build_object('usage', {_USAGE}, 'output', u.output)))"""

# Failures keep a join to the batch (its poison test reads each row's errors before
# the update): "j.id + 0" so that the ids are the only way in (see the fence above).
# Batches of failures are small, and never planned generically (prepare=False).
FAIL = f"""
UPDATE ONLY supervisor.jobs AS j
SET state = CASE WHEN u.terminal OR u.poison OR j.attempt >= j.max_attempts
                 THEN 'discarded' ELSE 'retryable' END,
    run_at = CASE WHEN u.terminal OR u.poison OR j.attempt >= j.max_attempts
                  THEN j.run_at ELSE now() + u.delay * interval '1 second' END,
    finished_at = CASE WHEN u.terminal OR u.poison OR j.attempt >= j.max_attempts
                       THEN now() END,
    errors = supervisor.capped_errors(j.errors || {_FAILED_ENTRY}
      || CASE WHEN u.poison THEN jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'poison',
        'message', u.poison_after || ' attempts in a row failed the same way (' || u.signature
                   || '): discarded as poison, attempts left unspent',
        'traceback', NULL, 'at', now(), 'supervisor', %(owner)s::text))
         ELSE '[]'::jsonb END),
    usage = {_USAGE}, output = u.output,
    lease_owner = NULL, lease_expires_at = NULL,
    -- as in COMPLETE: a failure before its start was written carries the start
    attempted_at = coalesce(j.attempted_at, now() - coalesce(u.ran, 0) * interval '1 second')
FROM (SELECT v.*, v.signature IS NOT NULL AND v.poison_after > 0 AND NOT EXISTS (
          SELECT 1 FROM generate_series(1, v.poison_after - 1) AS back(n)
          WHERE p.errors -> (-back.n) ->> 'signature' IS DISTINCT FROM v.signature) AS poison
      FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(kinds)s::text[],
                  %(messages)s::text[], %(tracebacks)s::text[], %(delays)s::float8[],
                  %(terminal)s::bool[], %(signatures)s::text[], %(poison_after)s::int[],
                  %(ran)s::float8[], {_USAGE_ARRAYS})
           AS v(id, attempt, kind, message, traceback, delay, terminal, signature,
                poison_after, ran, cpu, wall, rss, output)
      JOIN ONLY supervisor.jobs p ON p.id = ANY(%(ids)s::bigint[]) AND p.id + 0 = v.id) AS u
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id + 0 = u.id AND j.attempt = u.attempt
  AND j.lease_owner = %(owner)s AND {_RUNNING}
RETURNING j.id, u.poison
"""

RELEASE = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j
SET state = 'available', attempt = j.attempt - 1, lease_owner = NULL,
    lease_expires_at = NULL, heartbeat_at = NULL
WHERE {_FENCE}
RETURNING j.id
""", "ids", _ATTEMPTS)

# Claimed jobs whose expires_at passed while they were queued in a child (which never
# started them): final as 'expired', the attempt not counted.
EXPIRE_CLAIMED = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j
SET state = 'expired', attempt = j.attempt - 1, finished_at = now(), lease_owner = NULL,
    lease_expires_at = NULL, heartbeat_at = NULL
WHERE {_FENCE}
RETURNING j.id
""", "ids", _ATTEMPTS)

# A handler's workers.Snooze(delay): due again after the delay, its attempt unspent and
# no errors entry (it did not fail).
SNOOZE = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j
SET state = 'scheduled', attempt = j.attempt - 1,
    run_at = now() + u.delay * interval '1 second',
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
WHERE {_FENCE}
RETURNING j.id
""", "ids", {**_ATTEMPTS, "delay": "%(delays)s::float8[]"})

INTERRUPT = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j
SET state = 'available', attempt = j.attempt - 1,
    errors = supervisor.capped_errors(j.errors || {_ERROR_ENTRY}),
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
WHERE {_FENCE}
RETURNING j.id
""", "ids", {**_ATTEMPTS, "kind": "%(kinds)s::text[]", "message": "%(messages)s::text[]",
                       "traceback": "%(tracebacks)s::text[]"})

# A checkpoint (issue 28) rides on the renewal, fenced like it; checkpoint_at is when
# the last one was written.
RENEW = _by_place(f"""
UPDATE ONLY supervisor.jobs AS j
SET lease_expires_at = now() + %(ttl)s * interval '1 second', heartbeat_at = now(),
    progress = COALESCE(u.progress::jsonb, j.progress),
    checkpoint = COALESCE(u.checkpoint::jsonb, j.checkpoint),
    checkpoint_at = CASE WHEN u.checkpoint IS NULL THEN j.checkpoint_at ELSE now() END
WHERE {_FENCE}
RETURNING j.id
""", "ids", {**_ATTEMPTS, "progress": "%(progress)s::text[]",
                   "checkpoint": "%(checkpoints)s::text[]"})

PROMOTE = """
UPDATE ONLY supervisor.jobs SET state = 'available'
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
  AND state IN ('scheduled', 'retryable')
"""

# The old lease_owner is read in SET (which sees the row before the update) and comes
# back as the last errors entry's "supervisor", so no self-join is needed to return it.
# The outer test of j is _RUNNING for the reason the fence is: compared as the index's
# predicate, the planner joined jobs_lease_idx ("lease_expires_at < now()", every entry
# below the clock) to the primary key in a BitmapAnd for the rows found, which under a
# held horizon read every job run since the hold began, each round that rescued one.
# j is reached by its ids, as the fence's writes reach theirs (the note above them).
RESCUE = f"""
WITH o AS (
    -- A job its supervisor had claimed but not started (attempted_at is set at the start)
    -- goes back without spending the attempt: it never ran.
    SELECT id, lease_owner AS lost, attempted_at IS NULL AS unstarted
    FROM ONLY supervisor.jobs
    WHERE state = 'running' AND lease_expires_at < now()
      -- Leases below the floor were looked at by an earlier round (RescueFloor); a
      -- full scan passes -Infinity.
      AND lease_expires_at >= to_timestamp(%(floor)s)
      -- Right after the server restarted, every lease looks expired; its owners are
      -- reconnecting to renew them. Only a lease that stays expired past that counts.
      AND pg_postmaster_start_time() < now() - %(ttl)s * interval '1 second'
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE ONLY supervisor.jobs AS j
SET state = CASE WHEN o.unstarted THEN 'available'
                 WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'retryable' END,
    attempt = CASE WHEN o.unstarted THEN j.attempt - 1 ELSE j.attempt END,
    run_at = CASE WHEN o.unstarted OR j.attempt >= j.max_attempts THEN j.run_at
                  ELSE now() + least(%(base)s * power(%(factor)s, least(j.attempt - 1, 64)),
                                     %(cap)s)
                             * (1 - %(jitter)s * random()) * interval '1 second' END,
    finished_at = CASE WHEN NOT o.unstarted AND j.attempt >= j.max_attempts THEN now() END,
    errors = CASE WHEN o.unstarted THEN j.errors ELSE supervisor.capped_errors(
        j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'kind', 'lease_expired',
        'message', 'lease of supervisor ' || coalesce(o.lost, '?')
                   || ' expired at ' || j.lease_expires_at::text,
        'traceback', NULL, 'at', now(), 'supervisor', o.lost))) END,
    lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
FROM o
WHERE j.id = ANY(ARRAY(SELECT id FROM o)) AND j.id + 0 = o.id AND {_RUNNING}
  AND j.lease_expires_at < now()
RETURNING j.id, o.lost, o.unstarted
"""

# The unfinished jobs of these queues by state, for the burst's progress line (every
# half second on a terminal): through the partial indexes (``shared.live_sql``).
QUEUE_COUNTS = f"""
SELECT queue, state, count(*), count(*) FILTER (WHERE run_at <= now())
FROM ({live_jobs("queue, state, run_at", where="queue = ANY(%(queues)s::text[])")}) AS live
GROUP BY queue, state
"""

# One index probe per queue (the partial index on available jobs), so asking costs the
# same whether a queue holds ten jobs or ten million.
# The queues holding claimable work past a claim-order key each (their claim cursor, or
# the head of the index), each with its first such job's key (priority, run_at, id): a
# poll from the head tells the claim cursors
# (supervisor.engine.cursors) of a job behind them. Reading the first job in the claim
# index's order costs what the EXISTS it replaced cost (the scan stops at the first live
# entry either way); from a cursor it skips the entries of jobs claimed before it.
QUEUES_WITH_WORK = """
SELECT q.name, w.priority, extract(epoch FROM w.run_at)::float8, w.id
FROM unnest(%(queues)s::text[], %(start_priorities)s::int[], %(start_run_ats)s::float8[],
            %(start_ids)s::bigint[]) AS q(name, start_priority, start_run_at, start_id)
CROSS JOIN LATERAL (
    SELECT j.priority, j.run_at, j.id FROM ONLY supervisor.jobs j
    WHERE j.state = 'available' AND j.queue = q.name AND j.run_at <= now()
      AND (j.priority, j.run_at, j.id)
          > (q.start_priority, to_timestamp(q.start_run_at), q.start_id)
      AND j.kind = ANY(%(kinds)s::text[])
      AND (j.expires_at IS NULL OR j.expires_at > now())
    ORDER BY j.priority, j.run_at, j.id
    LIMIT 1) AS w
WHERE NOT EXISTS (SELECT 1 FROM supervisor.queues p WHERE p.name = q.name AND p.paused)
"""

HAS_DUE_WORK = """
SELECT EXISTS (
    SELECT 1 FROM ONLY supervisor.jobs j
    WHERE j.state = 'available' AND j.queue = ANY(%(queues)s::text[])
      AND j.kind = ANY(%(kinds)s::text[]) AND j.run_at <= now()
      AND (j.expires_at IS NULL OR j.expires_at > now())
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = j.queue AND q.paused)
) OR EXISTS (
    SELECT 1 FROM ONLY supervisor.jobs j
    WHERE j.state IN ('scheduled', 'retryable')
      AND j.run_at <= now() + %(horizon)s * interval '1 second'
      AND j.queue = ANY(%(queues)s::text[]) AND j.kind = ANY(%(kinds)s::text[])
      AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = j.queue AND q.paused)
)
"""

# What a burst leaves for later: jobs due past its horizon.
LEFT_FOR_LATER = """
SELECT count(*), min(run_at) FROM ONLY supervisor.jobs
WHERE state IN ('scheduled', 'retryable') AND queue = ANY(%(queues)s::text[])
  AND kind = ANY(%(kinds)s::text[])
"""

# Jobs waiting in these queues whose kind no loaded handler runs, per kind (a burst run
# says so as it ends, rather than "no more work").
UNHANDLED_WAITING = f"""
SELECT kind, count(*) FROM (
    {live_jobs("kind", ("available", "waiting"),
               "queue = ANY(%(queues)s::text[]) AND kind <> ALL(%(kinds)s::text[])")}
) AS waiting
GROUP BY kind ORDER BY count(*) DESC, kind
"""

# Seconds until the earliest scheduled or retrying job of these queues is due (negative:
# already due; NULL: none), so an idle supervisor wakes at that moment, not at its poll.
NEXT_DUE = """
SELECT extract(epoch FROM min(run_at) - now())::float8
FROM ONLY supervisor.jobs
WHERE state IN ('scheduled', 'retryable') AND queue = ANY(%(queues)s::text[])
  AND kind = ANY(%(kinds)s::text[])
"""

# Which of these queues are paused now.
# Paused queues, and whether each was paused with --stop-running (schema 0021).
PAUSED = """
SELECT name, stop_running FROM supervisor.queues
WHERE paused AND name = ANY(%(queues)s::text[])
"""

# Jobs running under this supervisor's name that it does not hold: the answer to a
# claim was lost with its connection, so nobody will run them. They go back at once,
# the attempt not counted (they never started).
RECONCILE = """
UPDATE ONLY supervisor.jobs
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

# Whether this supervisor leads the round; the server's clock, from which the next round's
# rescue floor is set; and whether a rescue may run at all (RESCUE's own guard, below).
TRY_LEAD = """
SELECT pg_try_advisory_xact_lock(%(key)s), extract(epoch FROM now())::float8,
       pg_postmaster_start_time() < now() - %(ttl)s * interval '1 second'
"""

# One kind of end at a time, each at its own age (completed and cancelled jobs at the
# retention, discarded and expired ones, the evidence, at theirs), each from a floor
# below which an earlier pass left nothing (supervisor.engine.maintenance.ScanFloor):
# under a held horizon the rows deleted since the hold began keep their entries in
# jobs_finished_idx, and a pass from the index's start read them all again, every
# batch. The states are literal so the partial index's predicate is implied.
_PRUNE = """
DELETE FROM ONLY supervisor.jobs
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE state IN ({states})
      AND finished_at >= to_timestamp(%(floor)s)
      AND finished_at < now() - %(age)s * interval '1 second'
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED))
"""
PRUNE_DONE = _PRUNE.format(states="'completed', 'cancelled'")
PRUNE_DISCARDED = _PRUNE.format(states="'discarded', 'expired'")

# Finished batches past the retention whose members and callback are all gone (pruned
# by PRUNE at their own retention), in bounded rounds like PRUNE; an open batch stays,
# whatever happened to its members. Schema 0028's index on finished_at finds them.
PRUNE_BATCHES = """
DELETE FROM supervisor.batches
WHERE id = ANY(ARRAY(
    SELECT b.id FROM supervisor.batches b
    WHERE b.finished_at < now() - %(retention)s * interval '1 second'
      AND NOT EXISTS (SELECT 1 FROM supervisor.jobs j WHERE j.batch_id = b.id)
      AND (b.callback_id IS NULL
           OR NOT EXISTS (SELECT 1 FROM supervisor.jobs c WHERE c.id = b.callback_id))
    ORDER BY b.finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED))
"""

# Waiting jobs whose expires_at has passed end as 'expired' (never run), in batches, by
# the maintenance leader (schema 0016's partial index finds them). The claim already
# passes over them; this makes them final, counted and shown.
EXPIRE = """
UPDATE ONLY supervisor.jobs SET state = 'expired', finished_at = now()
WHERE id = ANY(ARRAY(
    SELECT id FROM ONLY supervisor.jobs
    WHERE expires_at <= now() AND expires_at IS NOT NULL
      AND state IN ('available', 'scheduled', 'retryable')
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED))
"""

DROP_STALE = """
DELETE FROM supervisor.supervisors
WHERE heartbeat_at < now() - %(stale)s * interval '1 second'
"""

LEAVE = "DELETE FROM supervisor.supervisors WHERE id = %(id)s"

# Each kind's default memory reservation (issue 27): the p95 of the newest 200 attempts'
# peaks that supervisors with a memory budget measured in the past day, once there are
# 20; before, the kind's largest peak (0026, issue 51: killed attempts included), so a
# new kind's first measured job is what a fresh supervisor admits its first jobs by. Both
# live in supervisor.kind_memory (0033): read by primary key, one row a kind, never from
# supervisor.jobs, whose reading a held MVCC horizon makes as costly as the hold is long.
# Read once a minute while a memory budget applies, never per claim.
KIND_MEMORY_P95 = """
SELECT m.kind, CASE WHEN cardinality(m.recent_rss) >= 20
                    THEN (SELECT percentile_disc(0.95) WITHIN GROUP (ORDER BY r)
                          FROM unnest(m.recent_rss) AS r)
                    ELSE m.peak_bytes END
FROM supervisor.kind_memory m
WHERE m.kind = ANY(%(kinds)s::text[]) AND m.updated_at > now() - interval '1 day'
"""

# What each kind's attempts here used since the last write (0026, 0033): ``kinds`` and
# ``peaks`` side by side, one entry an attempt, oldest first. A row younger than a day
# has its peak raised and the new samples put before its own, the newest 200 kept; an
# older one is replaced by them.
KIND_MEMORY_SAVE = """
INSERT INTO supervisor.kind_memory AS m (kind, peak_bytes, recent_rss)
SELECT kind, max(rss), (array_agg(rss ORDER BY n DESC))[1:200]
FROM unnest(%(kinds)s::text[], %(peaks)s::bigint[]) WITH ORDINALITY AS s(kind, rss, n)
WHERE rss > 0
GROUP BY kind
ON CONFLICT (kind) DO UPDATE
SET peak_bytes = CASE WHEN m.updated_at > now() - interval '1 day'
                      THEN greatest(m.peak_bytes, excluded.peak_bytes)
                      ELSE excluded.peak_bytes END,
    recent_rss = CASE WHEN m.updated_at > now() - interval '1 day'
                      THEN (excluded.recent_rss || m.recent_rss)[1:200]
                      ELSE excluded.recent_rss END,
    updated_at = now()
"""

# The circuit breaker per kind (issue 27, supervisor/breaker/).
# Crashes of this turn, one row each; a kind whose crashes within the window (these
# included: a CTE's inserted rows are not visible to the rest of its statement) exceed
# the limit is paused for the cool-down, unless it is paused already. Its crash rows are
# then cleared, so after the cool-down it starts counting afresh.
KIND_CRASHES = """
WITH added AS (
    INSERT INTO supervisor.kind_crashes (kind)
    SELECT unnest(%(kinds)s::text[])
    RETURNING kind
), counted AS (
    SELECT k.kind,
           (SELECT count(*) FROM supervisor.kind_crashes c
            WHERE c.kind = k.kind AND c.at > now() - %(window)s * interval '1 second')
           + (SELECT count(*) FROM added a WHERE a.kind = k.kind) AS crashes
    FROM (SELECT DISTINCT unnest(%(kinds)s::text[]) AS kind) AS k
)
INSERT INTO supervisor.kind_pauses AS p (kind, paused_until, reason, crashes)
SELECT kind, now() + %(cooldown)s * interval '1 second',
       crashes || ' crashes within ' || %(window)s || ' s (breaker_failures '
       || %(failures)s || ')', crashes
FROM counted WHERE crashes > %(failures)s
ON CONFLICT (kind) DO UPDATE
SET paused_until = EXCLUDED.paused_until, reason = EXCLUDED.reason,
    crashes = EXCLUDED.crashes, paused_at = now()
WHERE p.paused_until IS NOT NULL AND p.paused_until <= now()
RETURNING kind, crashes
"""

KIND_CRASHES_CLEAR = """
DELETE FROM supervisor.kind_crashes
WHERE kind = ANY(%(kinds)s::text[]) OR at < now() - %(window)s * interval '1 second'
"""

PAUSED_KINDS = """
SELECT kind, reason, extract(epoch FROM paused_until - now())::float8
FROM supervisor.kind_pauses
WHERE paused_until IS NULL OR paused_until > now()
"""
