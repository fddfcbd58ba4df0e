"""Every default and constant that more than one module needs, written once.

The parent's config (``supervisor.config``), the pool's settings and the child's config
all start from these; the CLI's help texts quote them. Times are seconds, sizes bytes.
"""

# NOTIFY channels. The names are also in the schema's trigger functions (0001, 0004).
NOTIFY_CHANNEL = "supervisor_jobs"  # payload: the queue that got work
CANCEL_CHANNEL = "supervisor_cancel"  # payload: the id of a job an operator cancelled
SCHEDULED_CHANNEL = "supervisor_scheduled"  # payload: a queue that got a job for later
PAUSED_CHANNEL = "supervisor_paused"  # payload: a queue that was paused
# payload: queue, priority, run_at (epoch seconds), tab-separated: where a job became
# available in the claim order (schema 0029; the claim cursors move back to it)
KEYS_CHANNEL = "supervisor_job_keys"
# payload: "kind_pauses" or "queue_limits", the table a statement changed (schema 0031)
SETTINGS_CHANNEL = "supervisor_settings"
# Seconds between reads of kind pauses and global limits by a supervisor that hears
# SETTINGS_CHANNEL (it reads them when told): the net for a notice missed. One that
# cannot LISTEN reads them at every poll.
SETTINGS_FALLBACK = 10.0

# Job states that are still work (not history).
LIVE_STATES = ("available", "scheduled", "retryable", "running")

HEARTBEAT_INTERVAL = 2.0  # a busy child beats this often
HEARTBEAT_TIMEOUT = 30.0  # silence beyond this while busy means hung
BOOT_TIMEOUT = 30.0  # a child must say READY within this
KILL_GRACE = 5.0  # SIGTERM to a child's group, then SIGKILL after this
MAX_RESULT_BYTES = 1 << 20  # a result's JSON beyond this fails the job
OUTPUT_CAPTURE = 64 * 1024  # bytes of what each attempt printed, kept with the attempt
MAX_FRAME_BYTES = 64 << 20  # the wire's frame cap, checked before a body is read
LEASE_TTL = 30.0  # a claim survives this long without renewal
GRACE = 25.0  # SIGTERM drain
POLL_INTERVAL = 1.0
BURST_HORIZON = 60.0  # --burst waits for retries and scheduled jobs due within this
RETENTION = 7 * 24 * 3600.0  # completed and cancelled jobs are pruned after this
DISCARDED_RETENTION = 30 * 24 * 3600.0  # discarded jobs are the evidence: kept longer
MAX_ATTEMPTS = 20  # attempts of a job whose row and handler say none
# Attempts in a row that crash the same way before a job is discarded as poison rather
# than retried; 0 turns it off.
POISON_AFTER = 2
# The crash-like failures that count as crashes (toward poison and the breaker) for a
# kind whose @job(counts_as_crash=...) says nothing: a child that died (signal, exit)
# and a hang. A timeout is what a slow downstream gives (a user who set max_attempts=5
# expects five tries) and a memory kill may be a neighbour's doing: neither counts.
COUNTS_AS_CRASH = ("crashed", "hung")
ADMISSION_PATIENCE = 30.0  # a big job waits this long before smaller ones stop overtaking
# The circuit breaker per kind: more than BREAKER_FAILURES crashes (as COUNTS_AS_CRASH
# or the kind's counts_as_crash say) of a kind within BREAKER_WINDOW, across every
# supervisor, pause the kind for BREAKER_COOLDOWN. 0 failures: off.
BREAKER_FAILURES = 10
BREAKER_WINDOW = 60.0
BREAKER_COOLDOWN = 300.0
JOB_TIMEOUT = 3600.0  # built-in hard timeout of one attempt; 0 disables it
MAINTENANCE_INTERVAL = 5.0
# A snapshot (or slot, or prepared transaction) holding the MVCC horizon longer than this
# is warned about, naming it (issue 40: dead row versions pile up in front of the claim);
# 0: never. A pg_dump or an analytics query may run for minutes; hours of a pinned
# horizon are what slowed the claim tenfold here.
HORIZON_WARN_AFTER = 300.0
HORIZON_LOOK_EVERY = 30.0  # seconds between two looks at the horizon's holder
# Seconds between two requests that the parent's prepared statements be planned again
# from the tables as they are (supervisor.db.nonblocking: a plan made while the queue
# table was small scanned all of it once it was large, until autovacuum analyzed it).
PLANS_FRESH_EVERY = 10.0
METRICS_MAX_KINDS = 50  # job kinds with a metrics label value of their own
METRICS_HOST = "127.0.0.1"  # /metrics and /healthz listen on loopback unless told
# The parent's statements, enforced by the server: it stops work nobody waits for. Kept
# below DATABASE_DEADLINE, so a slow statement on a live server is a retried error.
STATEMENT_TIMEOUT = 2.0
# Client-side bound on any one wait of the parent for the database (connect, statement,
# commit, a claim's answer). A server that accepts connections but does not answer
# never sends the statement_timeout error; past this the connection is abandoned and
# the outage path (reconnect with backoff) takes over.
DATABASE_DEADLINE = 3.0


def fence_margin(lease_ttl: float, database_deadline: float) -> float:
    """How long before its leases expire a supervisor that could not renew them stops
    its jobs (self-fencing): the longest the loop can be held by one wait (the
    deadline) plus a second for the kill, but at most a third of the lease, so a single
    late renewal (they come every third of a lease) never fences."""
    return min(database_deadline + 1.0, lease_ttl / 3)
