"""Django and SQLAlchemy: finding the psycopg connection inside an ORM's handle and
joining its transaction (Django's ``enqueue_on_commit`` is in
``shared.oncommit``).

Neither library is imported unless the caller uses it: an object can only be one of
theirs if the caller has imported that library already, so we look the classes up in
``sys.modules``, and an application that uses neither pays nothing.

* Django: ``django.db.connection`` (or ``connections[alias]``) on the postgresql backend
  with psycopg 3. Inside ``transaction.atomic()`` Django has turned autocommit off, so
  our statements join its transaction (and its savepoints); outside, they commit at once,
  as Django's own queries do.
* SQLAlchemy: ``Connection``, ``Session``, ``AsyncConnection``, ``AsyncSession`` on the
  ``postgresql+psycopg`` driver. We begin the transaction when none is open, exactly as
  SQLAlchemy's autobegin does on a first ``execute``, so the caller's ``commit()`` or
  ``rollback()`` decides the job's fate.
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg

from shared.db import UnusableConnection

Found = tuple[psycopg.Connection, str]


def sync_kind(obj: Any) -> str | None:
    """"django", "sqlalchemy" or None: which library's synchronous handle ``obj`` is."""
    base = _class("django.db.backends.base.base", "BaseDatabaseWrapper")
    proxy = _class("django.utils.connection", "ConnectionProxy")
    if (base and isinstance(obj, base)) or (proxy and isinstance(obj, proxy)):
        return "django"
    connection = _class("sqlalchemy.engine", "Connection")
    session = _class("sqlalchemy.orm", "Session")
    if (connection and isinstance(obj, connection)) or (session and isinstance(obj, session)):
        return "sqlalchemy"
    return None


def is_async(obj: Any) -> bool:
    """Whether ``obj`` is a SQLAlchemy ``AsyncConnection`` or ``AsyncSession``."""
    classes = [_class("sqlalchemy.ext.asyncio", name)
               for name in ("AsyncConnection", "AsyncSession")]
    return any(cls is not None and isinstance(obj, cls) for cls in classes)


def sync_driver_connection(obj: Any) -> Found | None:
    """The psycopg ``Connection`` behind a Django or SQLAlchemy handle, in the caller's
    transaction, with a label for error lines; None if ``obj`` is neither."""
    kind = sync_kind(obj)
    if kind == "django":
        return _django(obj)
    if kind == "sqlalchemy":
        return _sqlalchemy(obj)
    return None


async def async_driver_connection(obj: Any) -> tuple[psycopg.AsyncConnection, str] | None:
    """The psycopg ``AsyncConnection`` behind a SQLAlchemy async handle; None otherwise."""
    if not is_async(obj):
        return None
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.ext.asyncio import AsyncSession

    label = "the SQLAlchemy AsyncSession" if isinstance(obj, AsyncSession) else \
        "the SQLAlchemy AsyncConnection"
    try:
        if isinstance(obj, AsyncSession):
            obj = await obj.connection()  # autobegins the session's transaction
        if obj.closed or obj.invalidated:
            raise UnusableConnection(f"{label} is closed")
        if not obj.in_transaction():
            await obj.begin()
        raw = (await obj.get_raw_connection()).driver_connection
    except sa_exc.PendingRollbackError:
        raise UnusableConnection(_failed(label)) from None
    except sa_exc.ResourceClosedError:
        raise UnusableConnection(f"{label} is closed") from None
    if not isinstance(raw, psycopg.AsyncConnection):
        raise TypeError(_wrong_driver(label, obj.dialect.driver))
    return raw, label


def _django(obj: Any) -> Found:
    from django.db import connections

    wrapper = connections[obj.alias]  # a ConnectionProxy forwards .alias to the wrapper
    label = f"Django's connection {wrapper.alias!r}"
    if wrapper.vendor != "postgresql":
        raise TypeError(f"{label} is {wrapper.vendor}; jobs live in PostgreSQL: use "
                        "enqueue_on_commit() to enqueue after its commit instead")
    if wrapper.needs_rollback:
        raise UnusableConnection(_failed(label))
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise TypeError(_wrong_driver(label, type(raw).__module__.split(".")[0]))
    return raw, label


def _sqlalchemy(obj: Any) -> Found:
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.orm import Session

    label = "the SQLAlchemy Session" if isinstance(obj, Session) else \
        "the SQLAlchemy Connection"
    try:
        if isinstance(obj, Session):
            obj = obj.connection()  # autobegins the session's transaction
        if obj.closed or obj.invalidated:
            raise UnusableConnection(f"{label} is closed")
        if not obj.in_transaction():
            obj.begin()
        raw = obj.connection.driver_connection
    except sa_exc.PendingRollbackError:
        raise UnusableConnection(_failed(label)) from None
    except sa_exc.ResourceClosedError:
        raise UnusableConnection(f"{label} is closed") from None
    if not isinstance(raw, psycopg.Connection):
        raise TypeError(_wrong_driver(label, obj.dialect.driver))
    return raw, label


def _failed(label: str) -> str:
    return (f"{label} is inside a failed transaction (an earlier statement raised); "
            "roll it back before enqueueing")


def _wrong_driver(label: str, driver: str) -> str:
    return (f"{label} uses the {driver} driver; enqueueing in it needs psycopg 3 "
            "(postgresql+psycopg)")


def _class(module: str, name: str) -> type | None:
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None
