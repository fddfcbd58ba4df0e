"""Per-child and per-job hooks (issue 26), through real ``supervisor run`` processes
(hooks are process-wide, so they are loaded only there, from ``hooks_handlers``), and
their registration rules in-process."""

from __future__ import annotations

from contextlib import contextmanager

import orjson
import pytest
from e2e import Supervisor, job_row, run_burst

from shared.enqueue import enqueue
from workers import hooks

FAST = ("-n", "1", "--poll-interval", "0.1", "--app", "hooks_handlers")


def events(path) -> list[dict]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def run_hooks(dsn, tmp_path, fails: str = "", timeout: float = 60.0):
    log = tmp_path / "hooks.log"
    sup = run_burst(dsn, *FAST, env={"HOOKS_LOG": str(log), "HOOKS_FAIL": fails},
                    timeout=timeout)
    return sup, events(log)


@pytest.mark.slow
def test_hooks_run_in_order_around_each_job(dsn, tmp_path):
    first = enqueue("hooked", dsn=dsn)
    second = enqueue("hooked", dsn=dsn)
    _sup, seen = run_hooks(dsn, tmp_path)
    assert [(e["event"], e.get("job")) for e in seen] == [
        ("start", None),
        ("enter outer", first), ("enter inner", first), ("run", first),
        ("leave inner", first), ("leave outer", first),
        ("enter outer", second), ("enter inner", second), ("run", second),
        ("leave inner", second), ("leave outer", second),
        ("exit", None),
    ]
    assert len({e["pid"] for e in seen}) == 1  # all in the one child
    assert job_row(dsn, first)["state"] == job_row(dsn, second)["state"] == "completed"


@pytest.mark.slow
def test_an_around_job_hook_that_raises_entering_fails_the_job_as_hook(dsn, tmp_path):
    bad = enqueue("hooked", {"hook_fails": True}, max_attempts=1, dsn=dsn)
    good = enqueue("hooked", dsn=dsn)
    _sup, seen = run_hooks(dsn, tmp_path, "enter")
    row = job_row(dsn, bad)
    assert row["state"] == "discarded"
    (error,) = row["errors"]
    assert error["kind"] == "hook"
    assert "around_job hooks_handlers.outer raised: RuntimeError: no GPU left" in error["message"]
    assert not [e for e in seen if e["event"] == "run" and e["job"] == bad]  # never ran
    assert job_row(dsn, good)["state"] == "completed"  # the child carried on


@pytest.mark.slow
def test_an_around_job_hook_that_raises_leaving_fails_the_job_and_retries(dsn, tmp_path):
    bad = enqueue("hooked", {"hook_fails": True}, max_attempts=2, dsn=dsn)
    _sup, seen = run_hooks(dsn, tmp_path, "leave")
    row = job_row(dsn, bad)
    assert row["errors"][0]["kind"] == "hook"
    assert "cleanup failed" in row["errors"][0]["message"]
    # The inner hook was still left, innermost first, before the outer one raised.
    names = [e["event"] for e in seen if e.get("job") == bad][:5]
    assert names == ["enter outer", "enter inner", "run", "leave inner", "leave outer"]


@pytest.mark.slow
def test_on_discard_runs_once_when_the_last_attempt_fails(dsn, tmp_path):
    retried = enqueue("hooked", {"fail": "raise"}, max_attempts=2, dsn=dsn)
    discarded = enqueue("hooked", {"fail": "discard"}, max_attempts=5, dsn=dsn)
    log = tmp_path / "hooks.log"
    env = {"HOOKS_LOG": str(log), "HOOKS_FAIL": ""}
    run_burst(dsn, *FAST, env=env)
    with psycopg_conn(dsn) as conn:  # the retry is due after its backoff: due now
        conn.execute("UPDATE supervisor.jobs SET run_at = now() WHERE id = %s", (retried,))
    run_burst(dsn, *FAST, env=env)
    seen = events(log)
    assert job_row(dsn, retried)["state"] == job_row(dsn, discarded)["state"] == "discarded"
    calls = [(e["job"], e["attempt"], e["kinds"]) for e in seen if e["event"] == "discard"]
    assert calls == [(discarded, 1, ["discard"]), (retried, 2, ["error"])]


@pytest.mark.slow
def test_a_failing_on_discard_is_logged_and_the_job_is_discarded_all_the_same(dsn, tmp_path):
    job_id = enqueue("hooked", {"fail": "discard"}, dsn=dsn)
    sup, _seen = run_hooks(dsn, tmp_path, "discard")
    assert job_row(dsn, job_id)["state"] == "discarded"
    assert "on_discard hooks_handlers.dead_letter raised" in sup.err
    assert "the dead-letter store is down" in sup.err


@pytest.mark.slow
def test_a_failing_on_child_exit_is_logged(dsn, tmp_path):
    enqueue("hooked", dsn=dsn)
    sup, seen = run_hooks(dsn, tmp_path, "exit")
    assert [e["event"] for e in seen][-1] == "exit"
    assert "on_child_exit hooks_handlers.closing raised RuntimeError" in sup.err


@pytest.mark.slow
def test_a_failing_on_child_start_is_a_boot_failure_and_crash_loops(dsn, tmp_path):
    job_id = enqueue("hooked", dsn=dsn)
    log = tmp_path / "hooks.log"
    sup = Supervisor(dsn, "--burst", *FAST, env={"HOOKS_LOG": str(log), "HOOKS_FAIL": "start"})
    code = sup.wait(90)
    assert code != 0
    assert "on_child_start error: RuntimeError: the model file is missing" in sup.err
    assert "halted" in sup.err
    starts = [e for e in events(log) if e["event"] == "start"]
    assert len(starts) >= 5  # the crash-loop limit: boot failures in a row
    assert not [e for e in events(log) if e["event"] == "run"]
    assert job_row(dsn, job_id)["state"] == "available"  # never ran, attempt unspent


def psycopg_conn(dsn):
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


# -- registration, in-process (the lists are restored after each test) ---------------

@pytest.fixture
def clean_hooks(monkeypatch):
    for name in ("CHILD_START", "CHILD_EXIT", "AROUND_JOB", "DISCARD"):
        monkeypatch.setattr(hooks, name, [])
    return hooks


def test_a_hook_that_is_not_callable_is_refused(clean_hooks):
    with pytest.raises(hooks.HookError, match="@on_child_start needs a function, not 42"):
        hooks.on_child_start(42)


def test_the_same_function_twice_is_refused(clean_hooks):
    def load() -> None: ...

    hooks.on_child_start(load)
    with pytest.raises(hooks.HookError, match=r"@on_child_start: .*load is already registered"):
        hooks.on_child_start(load)


def test_a_reloaded_definition_replaces_the_old_one(clean_hooks):
    def make():
        def load() -> None: ...
        return load

    hooks.on_child_exit(make())
    newer = make()
    hooks.on_child_exit(newer)
    assert [newer] == hooks.CHILD_EXIT


def test_around_job_cannot_swallow_the_handlers_exception(clean_hooks):
    @hooks.around_job
    @contextmanager
    def swallow(ctx):
        try:
            yield
        except ValueError:
            pass

    with pytest.raises(ValueError):
        hooks.call_around(None, lambda: (_ for _ in ()).throw(ValueError("x")))


def test_drain_runs_around_job_hooks(clean_hooks):
    from shared import wire
    from workers.execution import JobExecutor

    seen = []

    @hooks.around_job
    @contextmanager
    def timed(ctx):
        seen.append(("enter", ctx.kind))
        yield
        seen.append(("leave", ctx.kind))

    from workers.registry import JobDefaults, JobHandle

    handle = JobHandle(lambda: 7, "hooks_unit", JobDefaults())
    executor = JobExecutor(lookup=lambda kind: handle)
    answer = executor.run(wire.Run(1, "hooks_unit", "default", 1, 3, args={}))
    assert isinstance(answer, wire.Done)
    assert seen == [("enter", "hooks_unit"), ("leave", "hooks_unit")]
