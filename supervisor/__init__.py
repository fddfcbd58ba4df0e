"""The parent process: CLI, main loop, claims, the pool of children, scheduling and
maintenance. Producers without handler code use ``supervisor.enqueue``."""

from shared.enqueue import enqueue, enqueue_many

__all__ = ["enqueue", "enqueue_many"]
