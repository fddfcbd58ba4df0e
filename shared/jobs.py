"""The job model: states, failure kinds, the retry backoff, and the record a claim
returns. Pure data and arithmetic, shared by the store, the pool and producers."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shared import defaults

# States of a row in supervisor.jobs.
AVAILABLE = "available"
SCHEDULED = "scheduled"
RUNNING = "running"
COMPLETED = "completed"
RETRYABLE = "retryable"
DISCARDED = "discarded"
CANCELLED = "cancelled"
EXPIRED = "expired"  # not started before its expires_at: never ran, never will

STATES = (AVAILABLE, SCHEDULED, RUNNING, COMPLETED, RETRYABLE, DISCARDED, CANCELLED, EXPIRED)
FINISHED_STATES = (COMPLETED, DISCARDED, CANCELLED, EXPIRED)
# Finished without completing: a waiter gets JobFailed, a dependent is cancelled.
FAILED_FINAL_STATES = (DISCARDED, CANCELLED, EXPIRED)
# While a job is in one of these, its unique_key is taken.
UNIQUE_STATES = (AVAILABLE, SCHEDULED, RUNNING, RETRYABLE)

# Kinds of failure, recorded in each errors[] entry as "kind".
FAIL_ERROR = "error"  # the handler raised
FAIL_DISCARD = "discard"  # the handler raised workers.Discard: terminal
FAIL_RETRY = "retry"  # the handler raised workers.Retry: retry at a chosen time
FAIL_BINDING = "binding"  # args do not fit the handler's signature: terminal
FAIL_ARGS = "args"  # args cannot reach the handler (unparsable here, over the frame cap): terminal
FAIL_UNKNOWN_KIND = "unknown_kind"  # no handler in this child for the kind: terminal
FAIL_RESULT = "result"  # result not serializable or too large
FAIL_CRASHED = "crashed"  # the child died (signal, os._exit, OOM kill)
FAIL_TIMEOUT = "timeout"  # ran past its hard timeout; child group killed
FAIL_HUNG = "hung"  # heartbeat silence; child group killed
# Out of memory: over max_memory_per_child, stopped before the container's limit, or
# killed by the kernel's OOM killer. Never poison nor a breaker's crash (issue 51): how
# much memory a job may use depends on what runs beside it, so it is retried.
FAIL_MEMORY = "memory"
FAIL_SHUTDOWN = "shutdown"  # still running at the end of the drain grace
FAIL_CANCELLED = "cancelled"  # cancelled by an operator while running
# The handler let workers.Stopping out after a stop notice (issue 28): from a drain or a
# fence, the job goes back uncharged with no errors entry and resumes from its checkpoint.
FAIL_STOPPED = "stopped"
FAIL_LEASE_EXPIRED = "lease_expired"  # its supervisor vanished; rescued by maintenance
FAIL_HOOK = "hook"  # an @around_job hook raised entering or leaving (workers.hooks)
# The handler raised workers.Snooze(delay): not a failure; runs again after the delay
# (carried as the answer's retry_delay) with its attempt unspent and no errors entry.
FAIL_SNOOZE = "snooze"
# Its expires_at passed before it started: it ends as 'expired', never run (the child
# answers so for a job that expired while queued in its pipe).
FAIL_EXPIRED = "expired"

# Two (``poison_after``) attempts in a row crashed the same way: discarded at once, the
# entry of this kind added after the last crash's (shared/jobs.crash_signature).
FAIL_POISON = "poison"

# Failures that may say the input kills its child every time (a crash, a memory blow-up,
# a hang, a timeout), as opposed to a handler's ordinary exception. Which of them count
# as crashes (toward poison and the breaker) is each kind's ``CrashRule``.
CRASH_FAILURES = frozenset({FAIL_CRASHED, FAIL_MEMORY, FAIL_HUNG, FAIL_TIMEOUT})

_HOW_IT_DIED = re.compile(r"killed by \S+|exited with code -?\d+|exited \(\w+\)")

# Failures that retrying cannot mend: the job is discarded at once.
TERMINAL_FAILURES = frozenset({FAIL_DISCARD, FAIL_BINDING, FAIL_ARGS, FAIL_UNKNOWN_KIND})



def crash_kinds(value: Iterable[str] | None, where: str) -> frozenset[str] | None:
    """``value`` (``@job(counts_as_crash=...)``, a config's) checked: a set of names
    from ``CRASH_FAILURES`` (empty: nothing counts), or None (the default). Raises
    ``ValueError`` with one line naming what is wrong."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(f"{where} must be a set of failure kinds among "
                         f"{', '.join(sorted(CRASH_FAILURES))}, not {value!r}")
    names = frozenset(value)
    unknown = sorted(str(name) for name in names - CRASH_FAILURES)
    if unknown:
        raise ValueError(f"{where} names {', '.join(unknown)}: only "
                         f"{', '.join(sorted(CRASH_FAILURES))} can count as crashes")
    return names


@dataclass(frozen=True)
class CrashRule:
    """Which crash-like failures count as crashes, per job kind: a counted one may make
    its job poison (``poison_after`` in a row with one signature) and counts toward its
    kind's circuit breaker; an uncounted one is an ordinary failed attempt, retried until
    ``max_attempts``. ``by_kind`` holds each handler's ``@job(counts_as_crash=...)``;
    other kinds get ``default`` (``defaults.COUNTS_AS_CRASH``: a crash and a hang, not
    a timeout nor a memory kill, see docs/cpu-heavy.md)."""

    by_kind: Mapping[str, frozenset[str]] = field(default_factory=dict)
    default: frozenset[str] = frozenset(defaults.COUNTS_AS_CRASH)

    def counts(self, job_kind: str, failure: str) -> bool:
        """Whether a ``failure`` of a ``job_kind`` job counts as a crash."""
        return failure in self.by_kind.get(job_kind, self.default)

    def signature(self, job_kind: str, failure: str, message: str) -> str | None:
        """The crash's signature if it counts (``crash_signature``), else None."""
        if not self.counts(job_kind, failure):
            return None
        return crash_signature(failure, message)


def crash_signature(kind: str, message: str) -> str | None:
    """What makes two crashes "the same" for poison detection (None: not a crash).
    ``crashed`` is told apart by how the child died (``killed by SIGSEGV``, ``exited
    with code 3``; the pid in ``child 4711 killed by SIGSEGV`` is left out); hung and
    timeout are one signature each; memory is none (``FAIL_MEMORY``)."""
    if kind not in CRASH_FAILURES:
        return None
    if kind != FAIL_CRASHED:
        return kind
    how = _HOW_IT_DIED.search(message)
    return f"{kind}: {how.group(0)}" if how else kind


# Error text a failed attempt stores (issue 50): the message is what the error search
# indexes (0013), so it is kept shorter than the traceback and the printed output. The
# whole of a job's errors is bounded too, in the database (``supervisor.capped_errors``,
# schema 0022): messages 98,304 characters in all, tracebacks and output 262,144, the
# first and the last attempts kept whole.
MESSAGE_LIMIT = 16 * 1024
TRACEBACK_LIMIT = 64 * 1024
OUTPUT_LIMIT = 64 * 1024
ERRORS_MESSAGE_BUDGET = 98304
ERRORS_TEXT_BUDGET = 262144

DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 0
DEFAULT_MAX_ATTEMPTS = defaults.MAX_ATTEMPTS


@dataclass(frozen=True)
class Backoff:
    """Exponential retry delay with full jitter on the upper half and a cap.

    The delay before attempt ``n + 1`` is ``base * factor ** (n - 1)`` capped at ``cap``,
    then scaled by a random factor in ``[1 - jitter, 1]`` so that a burst of failures does
    not come back as a burst of retries.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 3600.0
    jitter: float = 0.5

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        # Cap the exponent first so a huge attempt count cannot overflow the float.
        raw = self.base * self.factor ** min(exponent, 64)
        capped = min(raw, self.cap)
        spread = (rng or random).uniform(1.0 - self.jitter, 1.0)
        return capped * spread


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True, slots=True)
class ClaimPosition:
    """A place in the claim index's order after the queue (a job's priority, run_at in
    epoch seconds, id): where a fair claim's next look at the head starts (issue 40)."""

    priority: int
    run_at: float
    id: int


@dataclass(slots=True)
class ClaimedJob:
    """One job as a claim returns it: what the parent needs to run it and fence later
    writes. ``args_json`` is the args column as JSON text, never decoded by the parent."""

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    priority: int
    timeout: float | None
    args_json: str
    wait_seconds: float = 0.0  # from run_at to the claim, for metrics
    trace_context: str | None = None  # the producer's trace (JSON text), passed through
    checkpoint: str | None = None  # the last checkpoint (JSON text), the child's resume
    # Epoch seconds after which it must not start (None: never expires); the child
    # checks it again right before the start.
    expires_at: float | None = None
    cpus: int | None = None  # its reservation (shared.reservations); None: undeclared
    memory: int | None = None  # bytes
    resources: dict[str, int] | None = None  # counted resources it holds running: {"gpu": 1}
    # The indices of each counted resource admission gave it (``{"gpu": [1]}``), set
    # when it is dispatched; a GPU job's child sets CUDA_VISIBLE_DEVICES from them.
    devices: dict[str, list[int]] | None = None
    run_at: float = 0.0  # epoch seconds it was due: its place in the claim order
    # Its heartbeat timeout in seconds, resolved at claim beside ``timeout`` (its
    # handler's ``@job(heartbeat_timeout=...)``; None: the pool's).
    heartbeat_timeout: float | None = None
    # A fair claim's (``fair = "batch"``; None from any other): the job's batch (None:
    # of no batch), and the lowest batch id that had waiting members in its queue when
    # the claim began, the same on each job it took (None: no batch had any).
    batch_id: int | None = None
    first_batch: int | None = None
    # A fair claim's, the same on each job it took: where its group of jobs of no batch
    # starts next (None: nothing was due past its start).
    loose_next: ClaimPosition | None = None
