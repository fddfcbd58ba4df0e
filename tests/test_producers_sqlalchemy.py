"""Enqueueing inside SQLAlchemy transactions (the extra ``sqlalchemy``): ``conn=`` takes a
Connection or Session, sync or async, on the psycopg 3 driver, and the job shares the
caller's commit or rollback."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")

from psycopg.conninfo import conninfo_to_dict  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from shared.db import UnusableConnection  # noqa: E402
from shared.enqueue import enqueue, enqueue_many  # noqa: E402
from shared.producers.aio import enqueue_async, enqueue_many_async  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def url(dsn: str) -> sqlalchemy.engine.URL:
    p = conninfo_to_dict(dsn)
    return sqlalchemy.engine.URL.create(
        "postgresql+psycopg", username=p.get("user"), password=p.get("password"),
        host=p.get("host"), port=int(p["port"]) if p.get("port") else None,
        database=p.get("dbname"))


def kinds(conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT kind FROM supervisor.jobs ORDER BY id")]


def test_sync_connection_and_session_commit_and_roll_back(dsn, conn):
    engine = sqlalchemy.create_engine(url(dsn))
    try:
        with engine.connect() as sa:
            enqueue("conn_rolled_back", conn=sa)
            sa.rollback()
            enqueue("conn_committed", conn=sa)  # begins a transaction, as autobegin would
            enqueue_many("conn_many", [{}, {}], conn=sa)
            assert kinds(conn) == []
            sa.commit()
        with Session(engine) as session:
            session.execute(text("SELECT 1"))
            enqueue("session_committed", {"n": 1}, conn=session)
            assert kinds(conn)[-1] != "session_committed"
            session.commit()
            enqueue("session_rolled_back", conn=session)
            session.rollback()
        with Session(engine) as session, session.begin():
            enqueue_many("session_begin", [{}], conn=session)
    finally:
        engine.dispose()
    assert kinds(conn) == ["conn_committed", "conn_many", "conn_many", "session_committed",
                           "session_begin"]


def test_failed_session_and_closed_connection_are_refused(dsn, conn):
    engine = sqlalchemy.create_engine(url(dsn))
    try:
        with Session(engine) as session:
            with pytest.raises(sqlalchemy.exc.DBAPIError):
                session.execute(text("SELECT 1/0"))
            with pytest.raises(UnusableConnection, match="failed transaction") as err:
                enqueue("never", conn=session)
            assert "\n" not in str(err.value)
            session.rollback()
        sa = engine.connect()
        sa.close()
        with pytest.raises(UnusableConnection, match="SQLAlchemy Connection is closed"):
            enqueue("never", conn=sa)
        with pytest.raises(TypeError, match="async connection"):
            enqueue("never", conn=_async_session_for(dsn))
    finally:
        engine.dispose()
    assert kinds(conn) == []


def test_an_engine_on_another_driver_is_refused():
    engine = sqlalchemy.create_engine("sqlite://")
    try:
        with engine.connect() as sa, pytest.raises(
                TypeError, match=r"uses the pysqlite driver; .* needs psycopg 3"):
            enqueue("never", conn=sa)
    finally:
        engine.dispose()


def _async_session_for(dsn: str):
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    return AsyncSession(create_async_engine(url(dsn)))


def test_async_connection_and_session_commit_and_roll_back(dsn, conn):
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def main():
        engine = create_async_engine(url(dsn))
        try:
            async with engine.connect() as sa:
                await enqueue_async("aconn_rolled_back", conn=sa)
                await sa.rollback()
                await enqueue_async("aconn_committed", conn=sa)
                await enqueue_many_async("aconn_many", [{}, {}], conn=sa)
                assert kinds(conn) == []
                await sa.commit()
            async with AsyncSession(engine) as session:
                await session.execute(text("SELECT 1"))
                await enqueue_async("asession_committed", conn=session)
                await session.commit()
                await enqueue_async("asession_rolled_back", conn=session)
                await session.rollback()
                with pytest.raises(sqlalchemy.exc.DBAPIError):
                    await session.execute(text("SELECT 1/0"))
                with pytest.raises(UnusableConnection, match="failed transaction"):
                    await enqueue_async("never", conn=session)
                await session.rollback()
            with Session(sqlalchemy.create_engine(url(dsn))) as sync_session, \
                    pytest.raises(TypeError, match="synchronous connection"):
                await enqueue_async("never", conn=sync_session)
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert kinds(conn) == ["aconn_committed", "aconn_many", "aconn_many",
                           "asession_committed"]


def test_nothing_of_the_orms_is_imported_when_unused(dsn):
    import subprocess
    import sys

    script = (
        "import sys, asyncio\n"
        "from shared.enqueue import enqueue\n"
        "from shared.producers.aio import enqueue_async\n"
        "import psycopg\n"
        f"c = psycopg.connect({dsn!r})\n"
        "enqueue('k', conn=c); c.rollback()\n"
        f"asyncio.run(enqueue_async('k', dsn={dsn!r}))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'sqlalchemy', 'psycopg_pool')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM supervisor.jobs").fetchone() == (1,)
