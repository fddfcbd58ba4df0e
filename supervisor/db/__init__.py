"""The database room: the parent's connections, outages and every statement it runs.

Door: ``Database`` (connections, outage and reconnect, ``call``; every wait for the server
bounded by a client-side deadline, ``DatabaseHung``, and ended by a stop signal seen
through ``Interrupt``), ``Store`` (every SQL
statement, blocking), ``NonBlockingQuery`` and ``Prepared`` (a statement run without
stopping the loop), the per-job write records (``Attempt``, ``Completion``, ``Failure``,
``Renewal``, ``Snooze``), the other statements' parameter records
(``supervisor.db.params``) and typed rows (``supervisor.db.rows``), the claim's
``ClaimRequest``, ``ClaimResult`` and ``ClaimKey`` (``Store.run_claim``, ``Store.send_claim``; the
statement is built in ``supervisor.db.claim``), and ``connection_lost``. The other
statements are in ``supervisor.db.sql``. Global limits: ``read_limits``,
``renew_lease``, ``return_leases`` and their records (``supervisor.db.leases``).
``HistoryWriter``: the leader's per-minute history, sent on a connection of its own
that the loop never waits for (``supervisor.db.history_writer``), with the move of
finished jobs into archives and their drop (``ArchivePlan``,
``supervisor.db.archives``) and the hot table's size given back after a held horizon
(``Compaction``, ``supervisor.db.compaction``). ``write_apart`` and ``refused`` (and
``refusal_reason``): a batched write that one row PostgreSQL refuses cannot stall
(``supervisor.db.refused``). What a run's jobs ended as and what waits, from the table
(``run_failures``, ``cancelled_dependents``, ``waiting``), and each kind's p95 run time
(``kind_run_p95``), for the engine's summaries and the drain's estimate.
"""

from supervisor.db.archives import ArchivePlan, ArchiveRound
from supervisor.db.claim import ClaimBounds, ClaimKey, ClaimRequest, ClaimResult
from supervisor.db.compaction import Compaction
from supervisor.db.connections import DatabaseHung, Interrupt, Interrupted
from supervisor.db.database import Database, connection_lost
from supervisor.db.history_writer import HistoryWriter
from supervisor.db.kind_run_times import kind_run_p95
from supervisor.db.leases import (
    LeaseRow,
    Slice,
    StoredLimits,
    read_limits,
    renew_lease,
    return_leases,
)
from supervisor.db.nonblocking import NonBlockingQuery, Prepared
from supervisor.db.params import CrashCount, CrashLimits, Heartbeat, Prune, PruneBatches
from supervisor.db.records import Attempt, FailuresWritten, Renewal, Snooze
from supervisor.db.refused import Apart, refused, write_apart
from supervisor.db.refused import reason as refusal_reason
from supervisor.db.rows import KindPause, LaterWork, LeadRound, Rescued, TrippedKind
from supervisor.db.run_outcomes import (
    RunFailures,
    Waiting,
    cancelled_dependents,
    run_failures,
    waiting,
)
from supervisor.db.store import (
    FULL_SCAN,
    RESCUE_LIMIT,
    Completion,
    Failure,
    Store,
    StoreSettings,
)

__all__ = [
    "FULL_SCAN",
    "RESCUE_LIMIT",
    "Apart",
    "ArchivePlan",
    "ArchiveRound",
    "Attempt",
    "ClaimBounds",
    "ClaimKey",
    "ClaimRequest",
    "ClaimResult",
    "Compaction",
    "Completion",
    "CrashCount",
    "CrashLimits",
    "Database",
    "DatabaseHung",
    "Failure",
    "FailuresWritten",
    "Heartbeat",
    "HistoryWriter",
    "Interrupt",
    "Interrupted",
    "KindPause",
    "LaterWork",
    "LeadRound",
    "LeaseRow",
    "NonBlockingQuery",
    "Prepared",
    "Prune",
    "PruneBatches",
    "Renewal",
    "Rescued",
    "RunFailures",
    "Slice",
    "Snooze",
    "Store",
    "StoreSettings",
    "StoredLimits",
    "TrippedKind",
    "Waiting",
    "cancelled_dependents",
    "connection_lost",
    "kind_run_p95",
    "read_limits",
    "refusal_reason",
    "refused",
    "renew_lease",
    "return_leases",
    "run_failures",
    "waiting",
    "write_apart",
]
