"""Handlers for the native-thread tests, loaded with ``--app native_lazy_handlers``:
numpy is imported only by the handler, in the child, after the fork."""

from workers import job


@job
def native_pools_lazy() -> dict:
    import numpy  # noqa: F401
    from native_handlers import pools

    return pools()
