"""Enqueueing inside Django transactions (the extra ``django``), on Django's own
connection with its psycopg 3 backend, against a real test database."""

from __future__ import annotations

import os

import pgharness
import psycopg
import pytest

django = pytest.importorskip("django")

from shared.db import UnusableConnection  # noqa: E402
from shared.enqueue import enqueue, enqueue_many  # noqa: E402
from shared.oncommit import enqueue_on_commit  # noqa: E402
from workers.registry import REGISTRY, job  # noqa: E402

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def django_dsn(pg_base_dsn, _migrated_template):
    # Django's settings are per process: one database for this module, emptied per test.
    name = pgharness.unique_name("supervisor_dj")
    dsn = pgharness.create_database(pg_base_dsn, name, template=_migrated_template)
    os.environ["SUPERVISOR_DJANGO_TEST_DSN"] = dsn
    os.environ["DJANGO_SETTINGS_MODULE"] = "django_settings"
    django.setup()
    try:
        yield dsn
    finally:
        from django.db import connections

        connections.close_all()
        pgharness.drop_database(pg_base_dsn, name)
        os.environ.pop("SUPERVISOR_DJANGO_TEST_DSN", None)
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)


@pytest.fixture
def watcher(django_dsn):
    with psycopg.connect(django_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.jobs")
        yield conn


def kinds(conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT kind FROM supervisor.jobs ORDER BY id")]


def test_job_exists_exactly_when_atomic_commits(watcher):
    from django.db import connection, transaction

    with transaction.atomic():
        job_id = enqueue("committed", {"n": 1}, conn=connection)
        enqueue_many("committed_many", [{}, {}], conn=connection)
        assert kinds(watcher) == []  # not visible before the commit
    assert kinds(watcher) == ["committed", "committed_many", "committed_many"]
    assert watcher.execute("SELECT args FROM supervisor.jobs WHERE id = %s",
                           (job_id,)).fetchone() == ({"n": 1},)


def test_rollback_of_atomic_and_of_a_savepoint_takes_the_job_with_it(watcher):
    from django.db import connection, transaction

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        enqueue("rolled_back", conn=connection)
        raise Boom
    with transaction.atomic():
        enqueue("outer", conn=connection)
        with pytest.raises(Boom), transaction.atomic():
            enqueue("inner", conn=connection)
            raise Boom
    assert kinds(watcher) == ["outer"]


def test_handle_options_accept_the_connection_proxy_and_an_alias(watcher):
    from django.db import connection, connections, transaction

    @job(name="dj_handle", queue="dj")
    def handler(n: int) -> None: ...

    try:
        with transaction.atomic():
            handler.options(conn=connection).enqueue(n=1)
        with transaction.atomic(using="other"):
            handler.options(conn=connections["other"]).enqueue(n=2)
    finally:
        REGISTRY.pop("dj_handle", None)
    assert kinds(watcher) == ["dj_handle", "dj_handle"]


def test_a_broken_atomic_block_is_refused_in_one_line(watcher):
    from django.db import DatabaseError, connection, transaction

    with transaction.atomic():
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT 1/0")
        except DatabaseError:
            pass  # swallowed inside atomic(): Django marks the block for rollback
        with pytest.raises(UnusableConnection, match="failed transaction") as err:
            enqueue("never", conn=connection)
        assert "\n" not in str(err.value)
        transaction.set_rollback(True)
    assert kinds(watcher) == []


def test_on_commit_enqueues_after_commit_and_never_after_rollback(watcher, django_dsn):
    from django.db import transaction

    @job(name="dj_later")
    def later(n: int) -> None: ...

    try:
        with transaction.atomic():
            enqueue_on_commit("on_commit", {"n": 1}, dsn=django_dsn, queue="mail")
            later.options(dsn=django_dsn).enqueue_on_commit(n=2)
            assert kinds(watcher) == []
        assert kinds(watcher) == ["on_commit", "dj_later"]
        with pytest.raises(RuntimeError), transaction.atomic(using="other"):
            enqueue_on_commit("gone", using="other", dsn=django_dsn)
            raise RuntimeError("roll back")
        with pytest.raises(TypeError, match="must be a dict"), transaction.atomic():
            enqueue_on_commit("bad", [1], dsn=django_dsn)  # refused now, not at commit
    finally:
        REGISTRY.pop("dj_later", None)
    assert kinds(watcher) == ["on_commit", "dj_later"]
    from shared.producers.pool import producer_pool

    producer_pool(django_dsn).close()


def test_a_non_postgresql_django_connection_is_refused(watcher, django_dsn):
    from django.db import connections, transaction

    with pytest.raises(TypeError, match="is sqlite; jobs live in PostgreSQL"):
        enqueue("never", conn=connections["lite"])
    with transaction.atomic(using="lite"):  # the on_commit form works with any database
        enqueue_on_commit("after_lite", using="lite", dsn=django_dsn)
        assert kinds(watcher) == []
    assert kinds(watcher) == ["after_lite"]
    from shared.producers.pool import producer_pool

    producer_pool(django_dsn).close()


def test_on_commit_enqueues_under_the_span_that_asked_not_the_one_at_commit(watcher,
                                                                           django_dsn):
    from django.db import transaction
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    asked = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, False,
                        TraceFlags(1))
    # The span ends first, then the block commits: the enqueue runs outside the span.
    with transaction.atomic(), trace.use_span(NonRecordingSpan(asked)):
        enqueue_on_commit("traced_on_commit", dsn=django_dsn)
    [(carrier,)] = watcher.execute(
        "SELECT trace_context FROM supervisor.jobs WHERE kind = 'traced_on_commit'").fetchall()
    assert carrier == {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    from shared.producers.pool import producer_pool

    producer_pool(django_dsn).close()
