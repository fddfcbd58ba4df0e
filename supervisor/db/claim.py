"""The claim: what it asks (``ClaimRequest``), what comes back (``ClaimResult``), and its
statement, composed from named parts for each variant and built once.

A claim takes up to ``limit`` due jobs of one queue and, in the same statement and the
same commit, carries the writes that were waiting for it (completions, starts). What
varies from claim to claim, and picks the statement:

* the order: by stored priority (one ordered scan of the claim index, from the key
  ``start`` when the caller keeps a cursor: ``ClaimKey``), or aged (a job gains a
  priority step per ``aging`` seconds waited past its run_at);
* a per-key limit (``supervisor queues limit --per-key-max-running``) or none;
* the shape: bare (a blocking claim carrying nothing), alone (the non-blocking claim
  carrying nothing) or carrying (completions and starts ride on it).

Each variant's text is built on first use from the parts below and kept
(``claim_sql``, ``claim_prepared``). The parts, in the order a statement nests them:

``_candidates``      which jobs may be claimed and in what order (plain or aged), with
                     every claim-time rule of ``RULES`` (a new rule is one entry there);
``_lock_and_update`` locks the candidates (``FOR UPDATE SKIP LOCKED``) and marks them
                     running under this supervisor's lease;
``_keyed``           for a queue with a per-key limit, both of the above happen in the
                     schema's ``supervisor.claim_keyed()`` (it counts running jobs per key
                     under the queue's lock, in a snapshot taken after the lock);
``_carrying``        the completions and starts written by the same statement;
``_alone``           the claim in the carrying form's row shape, writing nothing.

Every form returns claimed jobs under the column names ``_COLUMNS``; each answer's rows
are read by those names (``row_maker``, ``decode``), never by a fixed position.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from shared.jobs import ClaimedJob, ClaimPosition
from supervisor.db.attempt_cost import completion_params
from supervisor.db.nonblocking import Prepared
from supervisor.db.records import Attempt, Completion, in_id_order
from supervisor.db.sql import COMPLETE, STARTED

# A blocking claim (on the work connection, whose plans PostgreSQL chooses) carrying at
# most this many writes runs as a prepared statement: a generic plan guesses ten rows
# for a batch, as good as a custom plan for a few, and it saves the parse and planning
# (about 1 ms of server CPU) of the claim after each job. Larger batches are planned
# for their size. The non-blocking claim connection prepares every claim and forces
# the generic plan (``Database``), which measured cheaper at every size: 32 writes
# 1.55 against 2.5 ms of server CPU, 128 5.0 against 5.7, 512 15.9 against 16.8
# (measured with the fence's earlier form, a join; today's reads each row's values at
# its place in the batch, and has one plan whatever the size: sql.py).
CACHED_PLAN_BATCH = 16

# The columns every claim form returns for a claimed job, read by name.
_COLUMNS = ("id", "kind", "queue", "attempt", "max_attempts", "priority", "timeout", "args",
            "wait", "trace_context", "checkpoint", "expires_at", "cpus", "memory", "resources",
            "run_at")
# A fair claim's two more: the job's batch, and the lowest batch that had waiting
# members in the queue when the claim began (where its next claim's loose scan starts).
_FAIR_COLUMNS = ("batch_id", "first_batch")
# The carrying form's extra column: true for a row that is a written completion.
_DONE = "done"


@dataclass(frozen=True, slots=True, order=True)
class ClaimKey:
    """A position in the claim index's order (after the queue): a job's priority, run_at
    (epoch seconds: a float8 round trip through ``to_timestamp`` is exact to the
    microsecond) and id; id 0 stands before every job of that priority and run_at. The
    plain claim's scan starts just after one (``ClaimRequest.start``) so it does not walk
    the entries of jobs claimed before it (issue 40)."""

    priority: int
    run_at: float
    id: int = 0

    @classmethod
    def of(cls, job: ClaimedJob) -> ClaimKey:
        """The key ``job`` was claimed at."""
        return cls(job.priority, job.run_at, job.id)

    def before(self) -> ClaimKey:
        """The key just before every job of this priority and run_at."""
        return ClaimKey(self.priority, self.run_at)


# The start of a scan from the head of the index: before every key.
HEAD = ClaimKey(-(1 << 31), float("-inf"))
# The start of a fair claim's loose scan from the lowest batch: before every batch id.
LOWEST_BATCH = -(1 << 63)


@dataclass(frozen=True, slots=True)
class ClaimBounds:
    """The most a job may reserve for a bounded claim to take it: ``cpus``, ``memory``
    (None: any) and of each counted resource (``{"gpu": 2}``; a name left out: none)."""

    cpus: int
    memory: int | None
    resources: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One claim: up to ``limit`` due jobs of ``kinds`` in ``queue``, in priority order
    (aged by ``aging`` seconds per step when > 0), at most ``per_key`` running per
    concurrency key when set; ``completions`` and ``starts`` (the attempts children
    started) are written by the same statement."""

    queue: str
    kinds: Sequence[str]
    limit: int
    aging: float = 0.0
    per_key: int | None = None
    completions: Sequence[Completion] = ()
    starts: Sequence[Attempt] = ()
    # What a job may reserve to be taken; None: any job (the measured statements, no
    # reservation condition).
    bounds: ClaimBounds | None = None
    # The plain claim, and a fair claim's group of jobs of no batch, take only jobs
    # after this key; None: from the head of the index. Aged and per-key claims always
    # scan from the head.
    start: ClaimKey | None = None
    # Round-robin by batch (a queue's ``fair = "batch"``); a per-key limit wins over it.
    fair: bool = False
    # A fair claim's loose scan of the batches starts at this batch id (no batch below it
    # has waiting members in the queue: ``ClaimCursors``); None: at the lowest.
    first_batch: int | None = None
    # A fair claim's batches this supervisor claimed from, each with the key of the last
    # member it took: the claim reads each past that key (``_BATCH_WALK``).
    batch_starts: Mapping[int, ClaimKey] = field(default_factory=dict)
    # A fair claim's batches with jobs in this supervisor's hands (running, queued in a
    # pipe, waiting for a child): at equal turn a batch not among them goes first, so a
    # claim of one job made when a new batch arrives takes the newcomer's.
    held_batches: Sequence[int] = ()

    @property
    def writes(self) -> int:
        """How many writes the claim carries."""
        return len(self.completions) + len(self.starts)

    @property
    def takes_jobs(self) -> bool:
        """Whether the claim can take any job at all (else only its writes are due)."""
        return self.limit > 0 and bool(self.kinds)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What a claim did: the jobs it took, in claim order, and the ids of the carried
    completions that were fenced off (their lease had moved on: nothing written)."""

    jobs: list[ClaimedJob]
    fenced: list[int]


class Shape(enum.Enum):
    """How a claim statement is run: what it carries and in which row shape."""

    BARE = "bare"  # blocking, carries nothing: the claim's own RETURNING rows
    ALONE = "alone"  # carries nothing, in the carrying form's row shape (non-blocking)
    CARRYING = "carrying"  # completions and starts ride on it


@dataclass(frozen=True, slots=True)
class ClaimVariant:
    """Which statement a claim needs: the key of the builder's cache."""

    aged: bool
    keyed: bool
    shape: Shape
    bounded: bool = False
    fair: bool = False


def variant(request: ClaimRequest, blocking: bool) -> ClaimVariant:
    """The statement ``request`` needs, run blocking or not."""
    shape = Shape.CARRYING if request.writes else Shape.BARE if blocking else Shape.ALONE
    bounded = request.bounds is not None
    keyed = request.per_key is not None
    fair = request.fair and not keyed
    return ClaimVariant(request.aging > 0 and not fair, keyed, shape, bounded, fair)


def prepare(request: ClaimRequest) -> bool:
    """Whether the blocking claim runs as a server-side prepared statement: when it
    carries no writes, or at most ``CACHED_PLAN_BATCH`` (a larger batch is planned for
    its size). The non-blocking claim is always prepared (see ``CACHED_PLAN_BATCH``)."""
    return request.writes <= CACHED_PLAN_BATCH


# -- the parts ------------------------------------------------------------------------

_NOT_PAUSED = ("NOT EXISTS (SELECT 1 FROM supervisor.queues q "
               "WHERE q.name = %(queue)s AND q.paused)")

# Claim-time rules: conditions on a supervisor.jobs row, beyond being available, due, of
# the queue and of its kinds, that every job a claim takes must meet. A new rule is one
# entry here (and its test); it joins every scan that chooses candidates, in both
# orders. A job whose expires_at has passed is never handed out (issue 28): the
# maintenance leader marks it expired; until then the scan passes over it.
RULES: tuple[str, ...] = ("(expires_at IS NULL OR expires_at > now())",)

# The rule of a bounded claim (issue 27): once a supervisor met a job beyond its whole
# budget, its claims skip such jobs, left for a supervisor that can hold them.
BOUNDED = ("coalesce(cpus, 1) <= %(max_cpus)s::int "
           "AND (memory IS NULL OR memory <= %(max_memory)s::bigint) "
           "AND supervisor.resources_fit(resources, %(max_resources)s::jsonb)")


# The plain claim's scan starts just after the ClaimKey ``start`` (HEAD: the whole
# index). A row comparison over the index's columns after the queue, so it positions the
# index scan rather than filtering it: under a held horizon the entries of claimed jobs
# before the start are never read. Always present, so one prepared statement serves both.
_FROM_START = ("(priority, run_at, id) > (%(start_priority)s::int, "
               "to_timestamp(%(start_run_at)s::float8), %(start_id)s::bigint)")


# How a fair claim's scans of jobs_fair_idx test that a batch member waits: through an
# expression, as that index's predicate does (schema 0030), so they can use that index
# and never jobs_available_idx. Tested as ``state = 'available'``, both indexes served
# them, equally cheap by the statistics (a queue under a held horizon looks almost
# empty), and a cached plan walked jobs_available_idx with a filter on the batch: every
# entry a hold kept, at every claim (3,450 entries per job in a 150 s hold).
_MEMBER_WAITING = "state || '' = 'available'"

# A fair claim's walk of the batches that have waiting members, in batch id order:
# ``batches(pos, b, p, r, i)``, one row per step, ``b`` a batch found (NULL: a step that
# found none) and (p, r, i) the key its members are read after. It starts past the batch
# id ``after_batch`` (the batch below ``first_batch``, so the entries of the batches a
# pipeline finished, which a held horizon keeps, are never read). The batches this
# supervisor claimed from are known with the key of the last member it took
# (``known``): such a batch is tested by one probe at its key, and a step looks for an
# unknown batch only in the gap before the next known one. A loose probe from a batch's
# start would walk the entries of its members claimed since a hold began, at every claim
# (issue 40); within a gap there are only batches this supervisor never claimed from.
_BATCH_WALK = f"""known(b, p, r, i) AS MATERIALIZED (
        SELECT * FROM unnest(%(known_batches)s::bigint[], %(known_priorities)s::int[],
                             %(known_run_ats)s::float8[], %(known_ids)s::bigint[])),
    batches(pos, b, p, r, i) AS (
        SELECT %(after_batch)s::bigint, NULL::bigint, NULL::int, NULL::float8, NULL::bigint
        UNION ALL
        SELECT coalesce(gap.b, nk.b),
               coalesce(gap.b, CASE WHEN EXISTS (
                   SELECT 1 FROM ONLY supervisor.jobs w
                   WHERE w.{_MEMBER_WAITING} AND w.queue = %(queue)s AND w.batch_id = nk.b
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
                    WHERE g.{_MEMBER_WAITING} AND g.queue = %(queue)s
                      AND g.batch_id > s.pos
                      AND g.batch_id < coalesce(nk.b, 9223372036854775807)
                    ORDER BY g.batch_id LIMIT 1) AS b
            OFFSET 0) AS gap  -- not pulled up: each use of gap.b would probe again
        WHERE s.pos IS NOT NULL)"""

# What a fair claim returns beyond ``_COLUMNS`` (``_FAIR_COLUMNS``): the row's batch,
# and the walk's first batch found again (run once: it refers to no row; the walk stops
# at its first find), in the statement's snapshot, so it counts the members this claim
# takes.
_FAIR_RETURNING = f""",
          batch_id,
          (WITH RECURSIVE {_BATCH_WALK}
           SELECT b FROM batches WHERE b IS NOT NULL LIMIT 1) AS first_batch"""


# The lock's test that a chosen job is still waiting, by primary key only. Written as
# ``state = 'available'`` it lets the planner lock through jobs_available_idx (its partial
# predicate proven), filtering the queue's whole index by id, which it did when the
# statistics held few waiting jobs: under a held horizon that walks every entry claimed
# since (tests/test_fair_claim_horizon.py read 3,020 entries so, 20 without).
_STILL_AVAILABLE = "state || '' = 'available'"


def _rules(bounded: bool = False) -> str:
    rules = (*RULES, BOUNDED) if bounded else RULES
    return "".join(f"\n      AND {rule}" for rule in rules)


def _candidates(aged: bool, bounded: bool = False) -> str:
    """The ids a claim may take, best first, at most LIMIT of them.

    Plain: one ordered scan of the claim index. Aged (a queue's ``aging`` seconds, > 0):
    a job that has waited ``aging`` seconds past its run_at counts one priority step more
    urgent, two after twice that, and so on; the stored priority is never rewritten (the
    claim index stays as it is). The jobs that can come first by effective priority are
    among (a) the first LIMIT in the index's own order (a job not yet aged is never
    ahead of one before it in that order) and (b) for each priority level present, found
    by a loose index scan (one probe per level), its LIMIT oldest jobs already aged a
    step (within a level, older is never less urgent). The LIMIT best of those
    candidates are taken through the primary key. A statement of its own, so a queue
    without aging runs the plain claim unchanged (a shared statement with a branch cut
    by a one-time filter cost a quarter of a millisecond per claim in planning)."""
    if not aged:
        return f"""
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() AND {_FROM_START}
      AND {_NOT_PAUSED}{_rules(bounded)}
    ORDER BY priority, run_at, id
    LIMIT %(limit)s"""
    return f"""
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY({_aged_candidates(bounded)}))
      AND state = 'available' AND queue = %(queue)s AND run_at <= now()
      AND {_NOT_PAUSED}
    ORDER BY priority - floor(extract(epoch FROM now() - run_at) / %(aging)s::float8),
             run_at, id
    LIMIT %(limit)s"""


def _fair_candidates(bounded: bool = False) -> str:
    """The ids a fair claim may take (a queue's ``fair = "batch"``): round-robin by
    batch. Each batch with due jobs in the queue is found by a loose scan of
    ``jobs_fair_idx`` (one probe per batch), and its first LIMIT jobs in priority order
    are numbered 1, 2, ...; the jobs of no batch are one more group, those among the
    first LIMIT of the claim index's order (a bounded look: a job of no batch waits
    behind the batch members enqueued before it; one that looked further would read
    every waiting member when none is loose). The LIMIT best by (priority, number, a
    random draw) are taken: at equal
    priority every batch gets a job before any gets a second, and when the LIMIT ends a
    round the batches this supervisor holds no job of go first (``held_batches``), then
    the draw picks which. No row says whose turn it is, so claims of
    several supervisors never queue on one; each claim is fair on its own and in
    expectation across claims. A batch alone takes the whole LIMIT (work-conserving).
    Its own statement: queues that are not fair run the plain claim unchanged.

    Under a held horizon the entries of the members claimed since stay in both indexes,
    so each scan starts at a cursor (``supervisor.engine.cursors``): the walk of the
    batches at ``first_batch`` (no lower batch has waiting members), each batch this
    supervisor claimed from past the last member it took (``batch_starts``), the group
    of jobs of no batch at the key ``start``; and the lock finds the chosen ids by
    primary key only. Each job comes back with its batch and the walk's first batch
    found again (``_FAIR_COLUMNS``), which is where the next claim's walk starts."""
    rules = _rules(bounded)
    # FOR UPDATE (added by _lock_and_update) takes no UNION or window: the turn is
    # chosen inside the ARRAY, and the outer select only locks what it chose.
    return f"""
    SELECT id FROM ONLY supervisor.jobs
    WHERE id = ANY(ARRAY(WITH RECURSIVE {_BATCH_WALK}
    SELECT turn.id FROM (
        SELECT m.id, m.priority, m.n, batches.b = ANY(%(held_batches)s::bigint[]) AS held
        FROM batches CROSS JOIN LATERAL (
            SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id) AS n
            FROM (SELECT id, priority, run_at FROM ONLY supervisor.jobs
                  WHERE {_MEMBER_WAITING} AND queue = %(queue)s AND batch_id = batches.b
                    AND (priority, run_at, id)
                        > (batches.p, to_timestamp(batches.r), batches.i)
                    AND kind = ANY(%(kinds)s::text[]) AND run_at <= now(){rules}
                  ORDER BY priority, run_at, id
                  LIMIT %(limit)s) AS due) AS m
        WHERE batches.b IS NOT NULL
        UNION ALL
        SELECT id, priority, row_number() OVER (ORDER BY priority, run_at, id), false
        FROM ({_loose_head(bounded)}) AS head
        WHERE head.batch_id IS NULL) AS turn
    ORDER BY turn.priority, turn.n, turn.held, random()
    LIMIT %(limit)s))
      AND {_STILL_AVAILABLE} AND queue = %(queue)s
      AND {_NOT_PAUSED}
    LIMIT %(limit)s"""


def _loose_head(bounded: bool = False) -> str:
    """A fair claim's look at the head of the claim index past its group's key: the
    first LIMIT due jobs, of any batch, in claim order (``_fair_candidates`` takes those
    of no batch among them)."""
    return f"""SELECT id, priority, run_at, batch_id FROM ONLY supervisor.jobs
              WHERE state = 'available' AND queue = %(queue)s
                AND kind = ANY(%(kinds)s::text[]) AND run_at <= now()
                AND {_FROM_START}{_rules(bounded)}
              ORDER BY priority, run_at, id
              LIMIT %(limit)s"""


# Where a fair claim's group of jobs of no batch may start next (``_LOOSE_NEXT_COLUMNS``),
# found after the claim from the look at the head it chose from, in the same snapshot:
# just before the first job of that look the claim did not take (lost its turn, or
# locked by another), or past the whole look when it took them all. In a queue of batch
# members only, the group's key would otherwise never move (none of its own is ever
# taken) and each claim's look at the head walked the entries of every member claimed
# since a hold began (issue 40).
_LOOSE_NEXT = """loose_head AS MATERIALIZED ({head}),
loose_next AS MATERIALIZED (
    SELECT priority, run_at, id FROM (
        (SELECT priority, run_at, id - 1 AS id, 0 AS o FROM loose_head
         WHERE id <> ALL (ARRAY(SELECT id FROM claimed))
         ORDER BY priority, run_at, id LIMIT 1)
        UNION ALL
        (SELECT priority, run_at, id, 1 FROM loose_head
         ORDER BY priority DESC, run_at DESC, id DESC LIMIT 1)) AS found
    ORDER BY o LIMIT 1)"""
_LOOSE_NEXT_COLUMNS = {
    "loose_priority": "(SELECT priority FROM loose_next)",
    "loose_run_at": "(SELECT extract(epoch FROM run_at)::float8 FROM loose_next)",
    "loose_id": "(SELECT id FROM loose_next)"}


def _aged_candidates(bounded: bool = False) -> str:
    """The aged claim's candidates (see ``_candidates``): the head of the index's order
    and each priority level's oldest aged jobs."""
    return f"""WITH RECURSIVE levels(priority) AS (
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
      AND run_at <= now(){_rules(bounded)}
    ORDER BY priority, run_at, id
    LIMIT %(limit)s) AS head
UNION ALL
SELECT aged.id FROM levels CROSS JOIN LATERAL (
    SELECT id FROM ONLY supervisor.jobs
    WHERE state = 'available' AND queue = %(queue)s AND priority = levels.priority
      AND kind = ANY(%(kinds)s::text[])
      AND run_at <= now() - %(aging)s::float8 * interval '1 second'{_rules(bounded)}
    ORDER BY run_at, id
    LIMIT %(limit)s) AS aged"""


def _lock_and_update(candidates: str, returning: str = "") -> str:
    """Lock the candidates and mark them running under this supervisor's lease.

    Kept in this exact form (DESIGN): the CTE-join claim fell to a full scan after
    ANALYZE, while id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP LOCKED)) keeps the index
    plan. The LIMIT lives inside the ARRAY, so the planner cannot drop it.
    trace_context (the producer's, issue 15) and the last checkpoint (issue 28) go to
    the child as the text they are, like the args."""
    return f"""UPDATE ONLY supervisor.jobs
SET state = 'running', attempt = attempt + 1, attempted_at = NULL,  -- set at its start
    lease_owner = %(owner)s, lease_expires_at = now() + %(ttl)s * interval '1 second',
    heartbeat_at = now(),
    -- A producer that left max_attempts out gets the handler's (or the config's) now.
    max_attempts = coalesce(max_attempts, (
        SELECT a.n FROM unnest(%(kinds)s::text[], %(kind_attempts)s::int[]) AS a(kind, n)
        WHERE a.kind = supervisor.jobs.kind), %(default_attempts)s)
WHERE id = ANY(ARRAY({candidates}
    FOR UPDATE SKIP LOCKED))
RETURNING id, kind, queue, attempt, max_attempts, priority, timeout, args::text AS args,
          extract(epoch FROM now() - run_at)::float8 AS wait,
          trace_context::text AS trace_context, checkpoint::text AS checkpoint,
          extract(epoch FROM expires_at)::float8 AS expires_at, cpus, memory,
          resources::text AS resources,
          extract(epoch FROM run_at)::float8 AS run_at{returning}"""


def _keyed(aged: bool, bounded: bool = False) -> str:
    """The claim of a queue with a per-key limit: the schema's claim_keyed() serialises
    these claims per queue and skips keys at their limit (shared/schema/0030_baseline.sql,
    first written by 0007; with aging, the overload first written by 0011, which orders as
    ``_candidates(aged=True)`` does). Queues without that limit never reach it. The
    function predates the trace_context (0008), checkpoint (0015), expires_at (0016),
    cpus and memory (0017) columns: they are
    read here, by primary key, one probe per row the function returned: a lateral
    subquery the planner cannot flatten (``OFFSET 0``), so whatever it believes of the
    table it has no way in but ``id = k.id`` (a join let a planner that thought the
    table held one row scan all of it, issue 40).
    ``bounded``: the overload of 0027_counted_resources.sql (0024's with resources),
    which also skips jobs beyond this supervisor's bounds (aged or not: it takes the
    aging, 0 for none)."""
    if bounded:
        aging = (",\n                            %(aging)s::float8, %(max_cpus)s::int, "
                 "%(max_memory)s::bigint, %(max_resources)s::jsonb")
    else:
        aging = ",\n                            %(aging)s::float8" if aged else ""
    columns = "k.id, k.kind, k.queue, k.attempt, k.max_attempts, k.priority, k.timeout, k.args"
    return f"""SELECT {columns},
       k.wait, j.trace_context::text AS trace_context, j.checkpoint::text AS checkpoint,
       extract(epoch FROM j.expires_at)::float8 AS expires_at, j.cpus, j.memory,
       j.resources::text AS resources,
       extract(epoch FROM j.run_at)::float8 AS run_at
FROM supervisor.claim_keyed(%(queue)s, %(kinds)s::text[], %(limit)s::int, %(per_key)s::int,
                            %(owner)s, %(ttl)s::float8, %(kind_attempts)s::int[],
                            %(default_attempts)s::int{aging}) AS k,
     LATERAL (SELECT * FROM ONLY supervisor.jobs WHERE id = k.id OFFSET 0) AS j"""


def _carrying(claim: str, columns: Sequence[str] = _COLUMNS, after: str = "",
              extra: Mapping[str, str] | None = None) -> str:
    """``claim`` carrying the completions of the jobs that just finished and the starts
    of those that began: one round trip and one commit (one WAL flush) instead of two,
    which is what bounds short jobs. A row must not be updated twice in one statement
    (which of the two updates wins is unspecified), so a start of a job completed in the
    same statement is left to its completion."""
    extra = extra or {}
    return f"""WITH done AS ({COMPLETE.strip()}),
started AS ({STARTED.strip()}
  AND NOT (j.id = ANY(%(ids)s::bigint[]))),
claimed AS ({claim}){after}
SELECT {", ".join(columns)},{_extra(extra)}
       false AS done
FROM claimed
UNION ALL
SELECT id, {", ".join(["NULL"] * (len(columns) - 1 + len(extra)))}, true FROM done"""


def _extra(extra: Mapping[str, str]) -> str:
    return "".join(f"\n       {value} AS {name}," for name, value in extra.items())


def _alone(claim: str, columns: Sequence[str] = _COLUMNS, after: str = "",
           extra: Mapping[str, str] | None = None) -> str:
    """A claim that carries no writes, in ``_carrying``'s row shape. Its plan may be
    cached (the parent prepares it): no batch arrays, so no plan that fits one batch
    size and not another."""
    return f"""WITH claimed AS ({claim}){after}
SELECT {", ".join(columns)},{_extra(extra or {})}
       false AS done
FROM claimed"""


@functools.cache
def claim_sql(v: ClaimVariant) -> str:
    """The text of variant ``v`` (``%(name)s`` placeholders), built once."""
    columns: tuple[str, ...] = _COLUMNS
    if v.keyed:
        claim = _keyed(v.aged, v.bounded)
    elif v.fair:
        # Always in a wrapping form: where its group of jobs of no batch starts next is
        # read from what ``claimed`` took (``_LOOSE_NEXT``).
        claim = _lock_and_update(_fair_candidates(v.bounded), _FAIR_RETURNING)
        columns = (*_COLUMNS, *_FAIR_COLUMNS)
        after = ",\n" + _LOOSE_NEXT.format(head=_loose_head(v.bounded))
        if v.shape is Shape.CARRYING:
            return _carrying(claim, columns, after, _LOOSE_NEXT_COLUMNS)
        return _alone(claim, columns, after, _LOOSE_NEXT_COLUMNS)
    else:
        claim = _lock_and_update(_candidates(v.aged, v.bounded))
    if v.shape is Shape.CARRYING:
        return _carrying(claim, columns)
    if v.shape is Shape.ALONE:
        return _alone(claim, columns)
    return claim


@functools.cache
def claim_prepared(v: ClaimVariant) -> Prepared:
    """Variant ``v`` in libpq's ``$n`` form, for the non-blocking runner, built once."""
    return Prepared(claim_sql(v))


# -- parameters and answers -------------------------------------------------------------

def params(request: ClaimRequest, owner: str, lease_ttl: float,
           max_attempts: Mapping[str, int], default_attempts: int) -> dict[str, Any]:
    """The parameters of ``request``'s statement (a superset: each variant uses its own)."""
    kinds = list(request.kinds)
    start = request.start or HEAD
    known = dict(sorted(request.batch_starts.items()))
    values: dict[str, Any] = {
        "owner": owner, "ttl": lease_ttl, "queue": request.queue, "kinds": kinds,
        "limit": request.limit, "aging": float(request.aging),
        "start_priority": start.priority, "start_run_at": start.run_at,
        "start_id": start.id,
        "after_batch": (LOWEST_BATCH if request.first_batch is None
                        else request.first_batch - 1),
        "head_priority": HEAD.priority, "head_run_at": HEAD.run_at,
        "known_batches": list(known), "known_priorities": [k.priority for k in known.values()],
        "known_run_ats": [k.run_at for k in known.values()],
        "known_ids": [k.id for k in known.values()],
        "held_batches": list(request.held_batches),
        "kind_attempts": [max_attempts.get(kind) for kind in kinds],
        "default_attempts": default_attempts}
    if request.per_key is not None:
        values["per_key"] = request.per_key
    bounds = request.bounds
    if bounds is not None:
        values["max_cpus"] = bounds.cpus
        values["max_memory"] = 1 << 62 if bounds.memory is None else bounds.memory
        values["max_resources"] = _json_text(bounds.resources)
    if request.writes:
        completions = in_id_order(request.completions)
        starts = in_id_order(request.starts)
        values |= {**completion_params(completions),
                   "started_ids": [a.id for a in starts],
                   "started_attempts": [a.attempt for a in starts]}
    return values


def row_maker(names: Sequence[str]) -> Callable[[Sequence[Any]], ClaimedJob | int]:
    """How a row of a claim statement whose columns are ``names`` is read: a claimed job
    becomes a ``ClaimedJob``, a written completion (the carrying form's ``done`` rows)
    its job id. Each column is found by its name, once per answer."""
    at = {name: i for i, name in enumerate(names)}
    (i_id, i_kind, i_queue, i_attempt, i_max_attempts, i_priority, i_timeout, i_args, i_wait,
     i_trace_context, i_checkpoint, i_expires_at, i_cpus, i_memory, i_resources,
     i_run_at) = (
        at[column] for column in _COLUMNS)
    i_done = at.get(_DONE)
    i_batch, i_first_batch = at.get("batch_id"), at.get("first_batch")
    i_loose = at.get("loose_priority")

    def make(v: Sequence[Any]) -> ClaimedJob | int:
        if i_done is not None and v[i_done]:
            return v[i_id]
        return ClaimedJob(id=v[i_id], kind=v[i_kind], queue=v[i_queue], attempt=v[i_attempt],
                          max_attempts=v[i_max_attempts], priority=v[i_priority],
                          timeout=v[i_timeout], args_json=v[i_args], wait_seconds=v[i_wait],
                          trace_context=v[i_trace_context], checkpoint=v[i_checkpoint],
                          expires_at=v[i_expires_at], cpus=v[i_cpus], memory=v[i_memory],
                          resources=None if v[i_resources] is None
                          else _resources(v[i_resources]),
                          run_at=v[i_run_at],
                          batch_id=None if i_batch is None else v[i_batch],
                          first_batch=None if i_first_batch is None else v[i_first_batch],
                          loose_next=None if i_loose is None or v[i_loose] is None
                          else ClaimPosition(v[i_loose], v[i_loose + 1], v[i_loose + 2]))
    return make


def _json_text(resources: Mapping[str, int]) -> str:
    return "{" + ",".join(f'"{name}":{n}' for name, n in sorted(resources.items())) + "}"


def _resources(text: str) -> dict[str, int] | None:
    """A row's resources column (JSON text) as counts; an entry that is no whole count
    (written by plain SQL) is kept as a need no supervisor has, so the job is left for
    none rather than run unreserved."""
    found = orjson.loads(text)
    if not isinstance(found, dict):
        return None
    return {str(name): n if isinstance(n, int) and not isinstance(n, bool) and n > 0
            else 1 << 30 for name, n in found.items()} or None


def cursor_rows(cursor: Any) -> Callable[[Sequence[Any]], ClaimedJob | int]:
    """``row_maker`` as a psycopg row factory, for the blocking claim."""
    return row_maker([column.name for column in cursor.description or ()])


def decode(request: ClaimRequest, rows: Sequence[ClaimedJob | int]) -> tuple[list[int],
                                                                            list[ClaimedJob]]:
    """(ids of the completions written, claimed jobs in claim order) from the rows of
    ``request``'s statement, as ``row_maker`` made them."""
    written = [row for row in rows if isinstance(row, int)]
    jobs = [row for row in rows if isinstance(row, ClaimedJob)]
    # RETURNING has no order; wait_seconds is now() - run_at, so -wait sorts by run_at.
    # An aged claim is in order of the priority it was claimed by.
    aging = request.aging
    if aging > 0:
        jobs.sort(key=lambda job: (job.priority - math.floor(job.wait_seconds / aging),
                                   -job.wait_seconds, job.id))
    else:
        jobs.sort(key=lambda job: (job.priority, -job.wait_seconds, job.id))
    return written, jobs
