"""The producer side's machinery behind ``shared.enqueue`` (sync) and ``shared.producers.aio``
(asyncio): argument checks, the statements as I/O-free plans, adapting whatever ``conn=``
the caller passes (psycopg, Django, SQLAlchemy), and the per-process connection pools.

Nothing here is imported by the supervisor's parent loop, and nothing here starts a thread.
"""
