"""The Python examples of the README, docs/producers.md and docs/batches.md, run as
written (handlers in tests/mypipeline.py) with the testing helpers: the jobs are
enqueued the way the docs show, asserted with ``enqueued``, and run with ``drain`` (the
plugin's ``supervisor_drain``), with no ``supervisor run``. Not here: the Django
examples, whose calls tests/test_producers_django.py makes (Django's settings are per
process, and that module owns them)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mypipeline
import psycopg
import pytest
from mypipeline import (
    assemble,
    build_report,
    export,
    nightly,
    poll_feed,
    publish,
    render,
    resize,
    send_mail,
    wait_for_upstream,
)

import supervisor
from supervisor.testing import enqueued, run_inline
from supervisor.testing.databases import TestServer


@pytest.fixture(scope="session")
def supervisor_test_server(pg_base_dsn):
    """The plugin's databases on the suite's own server (see tests/pgharness.py)."""
    return TestServer(pg_base_dsn)


def result_of(conn, job_id):
    return conn.execute("SELECT state, result FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def test_readme_example(supervisor_dsn, supervisor_drain, supervisor_enqueued,
                        supervisor_conn):
    first = resize.enqueue(path="a.png", width=64)                    # -> job id
    ids = resize.enqueue_many([{"path": f"{i}.png", "width": 64} for i in range(10_000)])
    later = resize.options(priority=1, delay=30).enqueue(path="c.png", width=8)

    assert len(ids) == 10_000
    waiting = supervisor_enqueued(resize)
    assert len(waiting) == 10_002
    assert [(j.id, j.state, j.priority) for j in waiting if j.id == later] == [
        (later, "scheduled", 1)]
    assert supervisor_enqueued(args={"path": "a.png"})[0].id == first

    summary = supervisor_drain(max_jobs=3)
    assert summary.completed == 3
    assert result_of(supervisor_conn, first) == ("completed", {"ok": True, "width": 64})
    progress = supervisor_conn.execute("SELECT progress FROM supervisor.jobs WHERE id = %s",
                                       (first,)).fetchone()[0]
    # a completed job's progress is final (issue 47): done = total, its last message kept
    assert progress == {"done": 3, "total": 3, "message": "decoding"}
    # the Discard branch, and the same handler without a database
    bad = resize.enqueue(path="a.gif", width=1)
    supervisor_conn.execute("DELETE FROM supervisor.jobs WHERE id <> %s", (bad,))
    assert supervisor_drain().discarded == 1
    assert run_inline(resize, path="x.png", width=3) == {"ok": True, "width": 3}


def test_readme_producers_without_handler_code(supervisor_dsn, supervisor_drain):
    with psycopg.connect(supervisor_dsn) as my_conn:
        supervisor.enqueue("resize", {"path": "d.png", "width": 8}, queue="images",
                           conn=my_conn)
        assert enqueued(kind="resize") == []            # not before the commit
    with psycopg.connect(supervisor_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, args) VALUES "
                     """('resize', 'images', '{"path": "e.png", "width": 8}')""")
        jobs = enqueued(kind="resize", queue="images")
        assert [j.args["path"] for j in jobs] == ["d.png", "e.png"]
        assert [j.max_attempts for j in jobs] == [None, None]  # left to the handler
        assert supervisor_drain().completed == 2
        attempts = conn.execute("SELECT max_attempts FROM supervisor.jobs ORDER BY id")
        assert [r[0] for r in attempts] == [5, 5]  # the handler's @job(max_attempts=5)


def test_readme_enqueue_from_threads_asyncio_and_sqlalchemy(supervisor_dsn, supervisor_drain):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    job_id = resize.enqueue(path="a.png", width=64)               # any thread

    async def from_asyncio():
        return await resize.enqueue_async(path="a.png", width=64)  # asyncio, no thread

    async_id = asyncio.run(from_asyncio())
    engine = sqlalchemy.create_engine(sqlalchemy_url(supervisor_dsn))
    try:
        with Session(engine) as s:                                 # SQLAlchemy
            resize.options(conn=s).enqueue(path="a.png", width=64); s.commit()  # noqa: E702
    finally:
        engine.dispose()
    assert len(enqueued(resize, args={"path": "a.png", "width": 64})) == 3
    summary = supervisor_drain()
    assert summary.by_kind["resize"].completed == 3
    assert supervisor.wait(job_id, 5) == supervisor.wait(async_id, 5) == {"ok": True,
                                                                         "width": 64}


def test_readme_concurrency_keys(supervisor_dsn, supervisor_drain):
    build_report.options(concurrency_key="customer-7").enqueue(month="2026-11")
    supervisor.enqueue("build_report", {"month": "2026-12"}, queue="reports",
                       concurrency_key="customer-7")
    assert [j.concurrency_key for j in enqueued(build_report)] == ["customer-7"] * 2
    assert supervisor_drain().completed == 2


def test_readme_enqueue_many_with_concurrency_keys(supervisor_dsn, supervisor_drain):
    months = ["2026-10", "2026-11"]
    customers = [1, 2]
    build_report.enqueue_many([{"month": m} for m in months],
                              concurrency_keys=[f"customer-{c}" for c in customers])
    assert sorted(j.concurrency_key for j in enqueued(build_report)) == ["customer-1",
                                                                        "customer-2"]
    assert supervisor_drain().completed == 2


def test_readme_and_batches_fan_out_fan_in(supervisor_dsn, supervisor_drain, supervisor_conn):
    tiles = [{"x": x, "y": y} for x in range(1, 4) for y in range(1, 3)]
    batch = render.enqueue_many(tiles, then=assemble.bind(path="out.png"))  # one transaction
    assert len(batch.ids) == 6 and batch.id
    a = publish.enqueue(day="sunday")
    b = publish.enqueue(day="saturday")
    later = publish.options(depends_on=[a, b]).enqueue(day="monday")  # after a and b complete
    assert enqueued(publish, args={"day": "monday"})[0].depends_on == (a, b)

    summary = supervisor_drain()

    assert summary.by_kind["render"].completed == 6
    assert summary.by_kind["assemble"].completed == 1
    assert summary.by_kind["publish"].completed == 3
    done = batch.wait(timeout=5)   # .total .completed .discarded .cancelled .callback_id
    assert (done.total, done.completed, done.discarded, done.cancelled) == (6, 6, 0, 0)
    assert supervisor.batch(batch.id).summary().callback_id == done.callback_id
    assert batch.eta() == 0  # seconds until done (forecast): none left
    assert supervisor.wait(done.callback_id, timeout=5) == "out.png: 18"
    assert supervisor.wait(later, timeout=5) == "published monday"
    assert asyncio.run(supervisor.wait_async(a, 5)) == "published sunday"


def test_readme_second_example_is_tests_wordcount_as_written():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Second example", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == (Path(__file__).resolve().parent / "wordcount.py").read_text()


def test_readme_second_example_split_map_merge(supervisor_dsn, supervisor_drain, tmp_path,
                                               monkeypatch):
    import wordcount

    book = tmp_path / "book.txt"
    book.write_text("the cat saw the other cat and the dog")
    monkeypatch.setattr(sys, "argv", ["wordcount.py", str(book)])
    # The script's main block as written, run over the module already imported (running
    # the file again would register its handlers a second time).
    source = Path(wordcount.__file__).read_text().split('if __name__ == "__main__":\n')[1]
    main = dict(vars(wordcount))
    exec(textwrap.dedent(source), main)
    summary = supervisor_drain()
    assert (summary.by_kind["split"].completed, summary.by_kind["count"].completed,
            summary.by_kind["merge"].completed) == (1, 4, 1)
    assert supervisor.wait(main["last"], timeout=5) == dict(Counter(book.read_text().split()))


def test_readme_soft_timeouts_and_snoozing(supervisor_dsn, supervisor_drain, supervisor_conn):
    done = export.enqueue(report_id=7)
    waiting = wait_for_upstream.enqueue(order_id=42)
    summary = supervisor_drain(fork=True)        # the soft timer is armed in a child
    assert result_of(supervisor_conn, done)[0] == "completed"
    assert [a.outcome for a in summary.attempts if a.id == waiting] == ["snoozed"]
    assert enqueued(wait_for_upstream)[0].attempt == 0  # the attempt is not spent

    mypipeline.UPSTREAM_READY.add(42)               # upstream is ready, and 60 s went by:
    supervisor_conn.execute("UPDATE supervisor.jobs SET run_at = now() WHERE id = %s",
                            (waiting,))
    assert supervisor_drain().completed == 1
    assert result_of(supervisor_conn, waiting)[0] == "completed"


def test_readme_periodic_jobs(supervisor_dsn, supervisor_drain):
    assert (nightly.schedule.cron, nightly.schedule.timezone) == ("0 3 * * *", "Europe/Berlin")
    assert poll_feed.schedule.every == 30
    nightly.enqueue()
    poll_feed.enqueue()
    summary = supervisor_drain()
    assert summary.by_kind["nightly"].completed == summary.by_kind["poll_feed"].completed == 1


def test_producers_threads(supervisor_dsn, supervisor_drain):
    paths = [f"{i}.png" for i in range(20)]
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda p: resize.enqueue(path=p, width=64), paths))
    assert sorted(j.id for j in enqueued(resize)) == sorted(ids)
    assert supervisor_drain().completed == 20


def test_producers_asyncio(supervisor_dsn, supervisor_drain):
    class App:  # the web framework's decorator, for the example to read as written
        def post(self, route):
            return lambda f: f

    app = App()
    more = ["m1.png", "m2.png"]

    @app.post("/images")
    async def upload(path: str):
        job_id = await resize.enqueue_async(path=path, width=64)
        ids = await resize.options(queue="bulk").enqueue_many_async(
            [{"path": p, "width": 64} for p in more])
        other = await supervisor.enqueue_async("send_mail", {"to": "a@example.com"})
        return {"job": job_id, "ids": ids, "other": other}

    answer = asyncio.run(upload("u.png"))
    assert [j.queue for j in enqueued(resize)] == ["images", "bulk", "bulk"]
    summary = supervisor_drain()
    assert summary.by_kind["resize"].completed == 3     # u.png and the two bulk ones
    assert summary.by_kind["send_mail"].completed == 1
    # without their width the bulk jobs are refused at the call, before any insert
    with pytest.raises(TypeError, match="args_list\\[0\\]: args do not fit resize"):
        asyncio.run(resize.enqueue_many_async([{"path": p} for p in more]))
    assert supervisor.wait(answer["other"], 5) == "sent to a@example.com"


def test_producers_asyncio_in_your_own_transaction(supervisor_dsn, supervisor_conn,
                                                  supervisor_drain):
    supervisor_conn.execute("CREATE TABLE images (path text)")
    dsn, path = supervisor_dsn, "t.png"

    async def example():  # as docs/producers.md writes it
        async with await psycopg.AsyncConnection.connect(dsn) as conn:  # noqa: SIM117
            async with conn.transaction():
                await conn.execute("INSERT INTO images (path) VALUES (%s)", (path,))
                await resize.options(conn=conn).enqueue_async(path=path, width=64)
            # both rows exist from here, or neither

    asyncio.run(example())
    assert enqueued(resize)[0].args == {"path": "t.png", "width": 64}
    assert supervisor_drain().completed == 1
    supervisor_conn.execute("DROP TABLE images")


def test_producers_sqlalchemy(supervisor_dsn, supervisor_conn, supervisor_drain):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    from sqlalchemy.orm import DeclarativeBase, Session

    class Base(DeclarativeBase):
        pass

    class Image(Base):
        __tablename__ = "images"
        id = sqlalchemy.Column(sqlalchemy.Integer, primary_key=True)
        path = sqlalchemy.Column(sqlalchemy.Text)

    engine = sqlalchemy.create_engine(sqlalchemy_url(supervisor_dsn))
    async_engine = create_async_engine(sqlalchemy_url(supervisor_dsn))
    Base.metadata.create_all(engine)
    path = "s.png"
    try:
        with Session(engine) as session:
            session.add(Image(path=path))
            resize.options(conn=session).enqueue(path=path, width=64)
            session.commit()

        async def example():
            async with AsyncSession(async_engine) as session:
                session.add(Image(path=path))
                await resize.options(conn=session).enqueue_async(path=path, width=64)
                await session.commit()
            await async_engine.dispose()

        asyncio.run(example())
    finally:
        engine.dispose()
    assert supervisor_conn.execute("SELECT count(*) FROM images").fetchone()[0] == 2
    assert len(enqueued(resize, args={"path": "s.png"})) == 2
    assert supervisor_drain().completed == 2
    supervisor_conn.execute("DROP TABLE images")


def test_examples_send_mail_inline():
    assert run_inline(send_mail, to="b@example.com") == "sent to b@example.com"


def sqlalchemy_url(dsn: str):
    import sqlalchemy
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    return sqlalchemy.engine.URL.create(
        "postgresql+psycopg", username=p.get("user"), password=p.get("password"),
        host=p.get("host"), port=int(p["port"]) if p.get("port") else None,
        database=p.get("dbname"))
