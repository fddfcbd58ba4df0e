"""Child-side job policy at the edges, with real forked children (issue 11): an error
message keeps its type, a NaN or infinity in a result is refused, a soft timeout is
catchable and never outlives its job, and Snooze answers as a snooze, not a failure."""

from __future__ import annotations

import childfaults_handlers  # noqa: F401  (handlers are imported before forking)
import orjson
import pytest
from pool_driver import drivers_made

from supervisor.pool import JobDone, JobFailed
from workers import Snooze

pytestmark = [pytest.mark.timeout(30), pytest.mark.slow]  # processes or waits: CI lane

_make_driver = pytest.fixture(name="make_driver")(drivers_made)


def test_an_error_message_keeps_its_type_and_first_line(make_driver):
    d = make_driver()
    out = d.run("cf_raise_noted")
    assert isinstance(out, JobFailed) and out.kind == "error", out
    assert out.message == "ValueError: disk is full"
    # Everything else is in the traceback: the second line and the note.
    assert "second line of the message" in out.traceback
    assert "hint: free some space" in out.traceback
    empty = d.run("cf_raise_empty")
    assert empty.message == "KeyError"


@pytest.mark.parametrize(("which", "where"), [
    ("nan", "result['values'][1] = nan"),
    ("inf", "result = -inf"),
    ("dataclass", "result[0].y = inf"),
])
def test_a_non_finite_float_in_a_result_is_refused(make_driver, which, where):
    d = make_driver()
    out = d.run("cf_result", orjson.dumps({"which": which}).decode())
    assert isinstance(out, JobFailed), out
    assert out.kind == "result" and where in out.message and "finite" in out.message


def test_a_result_with_null_and_finite_floats_is_stored_as_it_is(make_driver):
    d = make_driver()
    out = d.run("cf_result", '{"which": "fine"}')
    assert isinstance(out, JobDone), out
    assert orjson.loads(out.result_json) == {"v": [1.5, None, "null"]}


@pytest.mark.parametrize("busy", [False, True])
def test_a_soft_timeout_is_caught_by_the_handler_before_the_hard_kill(make_driver, busy):
    d = make_driver()
    args = orjson.dumps({"seconds": 5, "busy": busy}).decode()
    out = d.run("cf_soft", args, timeout=10)
    assert isinstance(out, JobDone), out
    result = orjson.loads(out.result_json)
    assert result["cleaned_up"] is True and 0.25 <= result["after"] < 4, result
    assert "0.3 s soft limit" in result["message"]


def test_an_uncaught_soft_timeout_fails_the_attempt_and_the_child_lives(make_driver):
    d = make_driver()
    out = d.run("cf_soft_uncaught", timeout=10)
    assert isinstance(out, JobFailed) and out.kind == "error", out
    assert out.message.startswith("workers.outcomes.SoftTimeout: soft timeout")
    assert d.run("cf_sleep", '{"seconds": 0}').result_json == "0"


def test_a_soft_timeout_never_fires_after_its_job(make_driver):
    d = make_driver()
    assert d.run("cf_soft_quick").result_json == '"quick"'
    # The next job runs well past the first one's 0.05 s and must not see its alarm.
    out = d.run("cf_sleep", '{"seconds": 0.3}')
    assert isinstance(out, JobDone) and out.result_json == "0.3", out


def test_the_supervisors_default_soft_timeout_applies_to_kinds_without_one(make_driver):
    d = make_driver(default_soft_timeout=0.2)
    assert d.run("cf_default_soft", timeout=10).result_json == '"soft"'
    # A kind's own soft_timeout wins over the default.
    out = d.run("cf_soft", '{"seconds": 0.25}', timeout=10)
    assert orjson.loads(out.result_json) == {"cleaned_up": False}


def test_snooze_answers_with_its_delay_and_is_not_terminal(make_driver):
    d = make_driver()
    out = d.run("cf_snooze", '{"delay": 12.5}')
    assert isinstance(out, JobFailed), out
    assert (out.kind, out.retry_delay, out.terminal) == ("snooze", 12.5, False)
    assert out.traceback is None


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "soon"])
def test_snooze_refuses_a_delay_that_is_not_a_time(bad):
    with pytest.raises((TypeError, ValueError)):
        Snooze(bad)


@pytest.mark.parametrize(("value", "seconds"), [("30s", 30.0), (12, 12.0), (0, 0.0)])
def test_default_soft_timeout_in_the_config_reaches_the_children(value, seconds):
    from supervisor.config import build_config

    settings = build_config({"default_soft_timeout": value}).pool_settings()
    assert settings.default_soft_timeout == seconds


def test_a_wrongly_typed_default_soft_timeout_is_one_clear_error():
    from supervisor.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="default_soft_timeout"):
        build_config({"default_soft_timeout": "soon"})


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_job_refuses_a_soft_timeout_that_is_not_a_time(bad):
    from workers import job

    with pytest.raises(ValueError, match="soft_timeout"):
        job(name="cf_never_registered", soft_timeout=bad)
