"""The parent process, one package per room (see docs/architecture.md): the arbiter and the
CLI, ``engine`` (the job flow), ``db`` (connections and SQL), ``pool`` (the forked
children), ``observe``, ``schedules`` and ``dashboard``. Producers without handler code
use ``supervisor.enqueue`` and ``supervisor.enqueue_many`` (the same functions as
``shared.enqueue``), and their asyncio forms."""

from typing import Any

_PRODUCERS = {
    "enqueue": "shared.enqueue",
    "enqueue_many": "shared.enqueue",
    "enqueue_async": "shared.producers.aio",
    "enqueue_many_async": "shared.producers.aio",
    "enqueue_on_commit": "shared.producers.orm",
}
__all__ = list(_PRODUCERS)


def __getattr__(name: str) -> Any:
    # Loaded on first use so that `import supervisor.<module>` stays light.
    module = _PRODUCERS.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
