"""One options type for every form of enqueue (``shared.options``): each form takes the
options it always took, refuses the others and bad values with the same errors, and a
kind's ``@job`` defaults layer under a call's options."""

from __future__ import annotations

import asyncio

import pytest

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from shared.options import CALL_OPTIONS, ENQUEUE_OPTIONS, JOB_OPTIONS, MANY_OPTIONS
from shared.producers.aio import enqueue_async, enqueue_many_async
from workers.registry import REGISTRY, job

pytestmark = pytest.mark.timeout(60)

UNREACHABLE = "postgresql://nobody:secret@127.0.0.1:1/nowhere"

# The keyword options each form took when each wrote its own signature out.
JOB = {"queue", "priority", "max_attempts", "timeout",
       "cpus", "memory",  # the reservation (issue 27), taken by every form
       "resources"}  # counted resources (issue 45), the same
CALL = JOB | {"run_at", "delay", "unique_key", "concurrency_key", "conn", "dsn",
              "expires_in", "expires_at",  # the last two: issue 28
              "depends_on"}  # every form waits for other jobs (issue 42)


def test_each_form_takes_the_options_it_took_before():
    one, many = CALL, CALL | {"unique_keys", "concurrency_keys"}
    assert JOB_OPTIONS == JOB  # @job, a batch's callback
    assert CALL_OPTIONS == CALL  # enqueue_async, enqueue_on_commit
    assert one == ENQUEUE_OPTIONS  # enqueue, handle.options
    assert many == MANY_OPTIONS  # enqueue_many, enqueue_many_async


@pytest.fixture
def handle():
    @job(name="options_test_kind", queue="q-default", priority=7, max_attempts=2, timeout=5)
    def options_test_kind(n: int = 0) -> None: ...

    yield options_test_kind
    REGISTRY.pop("options_test_kind", None)


@pytest.mark.parametrize("call, name", [
    (lambda h: enqueue("k", {}, bogus=1), "bogus"),
    (lambda h: enqueue("k", {}, unique_keys=["a"]), "unique_keys"),
    (lambda h: enqueue_many("k", [{}], depends_on=[1], bogus=1), "bogus"),
    (lambda h: asyncio.run(enqueue_async("k", {}, depends_on=[1], bogus=1)), "bogus"),
    (lambda h: asyncio.run(enqueue_many_async("k", [{}], bogus=1)), "bogus"),
    (lambda h: h.options(bogus=1), "bogus"),
    (lambda h: h.options(queue="q").options(then=None), "then"),
    (lambda h: job(bogus=1), "bogus"),
    (lambda h: Callback("k", {}, delay=1), "delay"),
])
def test_an_option_a_form_does_not_take_is_a_type_error_naming_it(call, name, handle,
                                                                   monkeypatch):
    monkeypatch.setenv("SUPERVISOR_DSN", UNREACHABLE)  # the database is never reached
    with pytest.raises(TypeError, match=repr(name)):
        call(handle)


@pytest.mark.parametrize("options, error, match", [
    ({"priority": "1"}, TypeError, "priority must be a 32-bit int"),
    ({"queue": ""}, ValueError, "queue must be a str"),
    ({"queue": None}, ValueError, "queue must be a str"),
    ({"max_attempts": 0}, ValueError, "max_attempts must be an int"),
    ({"timeout": -1}, ValueError, "timeout must be a positive number"),
    ({"delay": 1, "run_at": object()}, ValueError, "not both"),
])
def test_bad_values_get_the_same_error_from_every_form(options, error, match, monkeypatch):
    monkeypatch.setenv("SUPERVISOR_DSN", UNREACHABLE)
    forms = [
        lambda: enqueue("k", {}, **options),
        lambda: enqueue_many("k", [{}], **options),
        lambda: asyncio.run(enqueue_async("k", {}, **options)),
        lambda: asyncio.run(enqueue_many_async("k", [{}], **options)),
    ]
    if "delay" not in options:  # a callback carries how its job runs, not when
        forms.append(lambda: enqueue_many("k", [{}], then=Callback("cb", {}, **options)))
    for form in forms:
        with pytest.raises(error, match=match):
            form()


def test_a_kinds_defaults_layer_under_a_calls_options(handle, conn):
    def row(job_id):
        return conn.execute("SELECT queue, priority, max_attempts, timeout "
                            "FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()

    assert row(handle.options(conn=conn).enqueue(n=1)) == ("q-default", 7, 2, 5.0)
    layered = handle.options(priority=1, conn=conn).options(queue="q-other", timeout=None)
    assert row(layered.enqueue(n=2)) == ("q-other", 1, 2, 5.0)  # None: the kind's default
    [many] = handle.options(max_attempts=9, conn=conn).enqueue_many([{"n": 3}])
    assert row(many) == ("q-default", 7, 9, 5.0)
    callback = handle.options(priority=3, delay=60).bind(n=4)
    assert (callback.kind, dict(callback.args), callback.options) == (
        "options_test_kind", {"n": 4},
        {"queue": "q-default", "priority": 3, "max_attempts": 2, "timeout": 5,
         "cpus": None, "memory": None, "resources": None})


def test_depends_on_reaches_enqueue_many_and_is_checked_before_the_database(handle):
    # Every form takes depends_on now (issue 42); its checks run before any connection.
    with pytest.raises(ValueError, match=r"depends_on cannot be combined with run_at, delay"):
        handle.options(depends_on=[1], delay=5).enqueue_many([{}])
    with pytest.raises(ValueError, match=r"non-empty list of job ids"):
        handle.options(depends_on=[0]).enqueue_many([{}])
