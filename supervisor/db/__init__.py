"""The database room: the parent's connections, outages and every statement it runs.

Door: ``Database`` (connections, outage and reconnect, ``call``), ``Store`` (every SQL
statement, blocking), ``NonBlockingQuery`` and ``Prepared`` (a statement run without
stopping the loop), the write records ``Completion`` and ``Failure``, and
``connection_lost``. The statements themselves are in ``supervisor.db.sql``.
"""

from supervisor.db.database import Database, connection_lost
from supervisor.db.nonblocking import NonBlockingQuery, Prepared
from supervisor.db.store import Completion, Failure, Store

__all__ = ["Completion", "Database", "Failure", "NonBlockingQuery", "Prepared", "Store",
           "connection_lost"]
