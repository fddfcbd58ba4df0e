"""The database room: the parent's connections, outages and every statement it runs.

Door: ``Database`` (connections, outage and reconnect, ``call``; every wait for the server
bounded by a client-side deadline, ``DatabaseHung``, and ended by a stop signal seen
through ``Interrupt``), ``Store`` (every SQL
statement, blocking), ``NonBlockingQuery`` and ``Prepared`` (a statement run without
stopping the loop), the write records ``Completion`` and ``Failure``, the claim's
``ClaimRequest`` and ``ClaimResult`` (``Store.run_claim``, ``Store.send_claim``; the
statement is built in ``supervisor.db.claim``), and ``connection_lost``. The other
statements are in ``supervisor.db.sql``. Global limits: ``read_limits``,
``renew_lease``, ``return_leases`` and their records (``supervisor.db.leases``).
``HistoryWriter``: the leader's per-minute history, sent on a connection of its own
that the loop never waits for (``supervisor.db.history_writer``). ``write_apart`` and
``refused``: a batched write that one row PostgreSQL refuses cannot stall
(``supervisor.db.refused``).
"""

from supervisor.db.claim import ClaimRequest, ClaimResult
from supervisor.db.connections import DatabaseHung, Interrupt, Interrupted
from supervisor.db.database import Database, connection_lost
from supervisor.db.history_writer import HistoryWriter
from supervisor.db.leases import (
    LeaseRow,
    Slice,
    StoredLimits,
    read_limits,
    renew_lease,
    return_leases,
)
from supervisor.db.nonblocking import NonBlockingQuery, Prepared
from supervisor.db.refused import Apart, refused, write_apart
from supervisor.db.store import Completion, Failure, Store

__all__ = ["Apart", "ClaimRequest", "ClaimResult", "Completion", "Database", "DatabaseHung",
           "Failure", "HistoryWriter", "Interrupt", "Interrupted", "LeaseRow", "NonBlockingQuery",
           "Prepared", "Slice", "Store", "StoredLimits", "connection_lost", "read_limits",
           "refused", "renew_lease", "return_leases", "write_apart"]
