"""A child's states as the parent sees them, and what one read of its pipe saw."""

# Child states, as the parent sees them.
BOOTING = "booting"  # forked, READY not seen yet
IDLE = "idle"  # ready for a job
BUSY = "busy"  # jobs in flight: the head running (or about to), the rest queued
STOPPING = "stopping"  # told STOP, or its last answer said so, running nothing: to exit
KILLED = "killed"  # signalled by the parent: waiting to reap it
DEAD = "dead"  # reaped; the record is being wound up

ACTIVE_STATES = frozenset({BOOTING, IDLE, BUSY})  # count toward the pool's size

NO_LIMIT = 1 << 30  # what an empty child may hold: the next job sets its limit

# What one ``read`` saw, as bits.
GOT_DATA = 1  # bytes arrived: the pipe may hold more
READIED = 2  # its first READY
ANSWERED = 4  # the job in flight was answered (its outcome is in the list)
LAST = 8  # ... and the child exits right after that answer
BROKEN = 16  # a frame that cannot be trusted: ``broken`` says why; kill the child
CLOSED = 32  # end of file: nothing more will come
STARTED = 64  # the child took the next job of its queue
STARTED_SKIPPED = 128  # ... a job it was told to skip (the START crossed the SKIP): kill it
RETURNED = 256  # it gave back a job it was asked to (SKIPPED): its queue may be empty now

