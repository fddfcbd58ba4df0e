"""The parent process: CLI, main loop, claims, the pool of children, scheduling and
maintenance. Producers without handler code use ``supervisor.enqueue`` and
``supervisor.enqueue_many`` (the same functions as ``shared.enqueue``)."""

from typing import Any

__all__ = ["enqueue", "enqueue_many"]


def __getattr__(name: str) -> Any:
    # Loaded on first use so that `import supervisor.<module>` stays light.
    if name in __all__:
        from shared import enqueue as _enqueue

        return getattr(_enqueue, name)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
