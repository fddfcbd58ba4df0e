"""One child's record on its own (``ChildProcess``), against a fake OS: what it sends,
what it makes of the frames it reads (typed events, in the order the child said them),
how it signals and winds up. No policy here: that is ``test_pool_policy.py``."""

from __future__ import annotations

import logging
import signal

import pytest
from pool_fakes import FakeOs, FakeSelector

from shared import wire
from shared.jobs import ClaimedJob
from supervisor.pool import JobDone, JobFailed, JobProgress, JobStarted, PoolSettings
from supervisor.pool.process import (
    BOOTING,
    BUSY,
    DEAD,
    KILLED,
    STOPPING,
    Broken,
    ChildProcess,
    CrossedSkip,
    Leaving,
    Readied,
)

pytestmark = pytest.mark.timeout(10)

TAG = object()  # what the selector key carries: the pool, in real use
NOW = 100.0


def job(job_id: int = 1, timeout: float | None = None) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "q", 2, 5, 0, timeout, '{"a": 1}')


class Rig:
    def __init__(self, **overrides) -> None:
        settings = dict(size=1, boot_timeout=10.0, heartbeat_timeout=5.0, kill_grace=3.0)
        settings.update(overrides)
        self.os = FakeOs()
        self.sel = FakeSelector()
        self.child = ChildProcess(42, 3, 10, 11, max_jobs=None, now=NOW,
                                  settings=PoolSettings(**settings), oscalls=self.os,
                                  selector=self.sel, tag=TAG,
                                  log=logging.getLogger("test.child"))
        self.outcomes: list = []  # the job records it reported, over every read

    def says(self, *messages, now: float = NOW) -> list:
        """What one read of these frames meant; its job records also go to
        ``outcomes``."""
        for m in messages:
            self.os.inbox.setdefault(10, bytearray()).extend(
                m if isinstance(m, bytes) else m.encode())
        news = self.child.read(now)
        self.outcomes += [n for n in news if type(n) not in (Readied, Leaving, Broken,
                                                            CrossedSkip)]
        return news

    def sent(self) -> list[wire.Message]:
        return [wire.decode(f) for f in wire.FrameReader().feed(bytes(self.os.written[11]))]


def busy(**overrides) -> Rig:
    rig = Rig(**overrides)
    rig.says(wire.Ready(42, 3))
    rig.child.run(job(1, timeout=2.0), NOW)
    return rig


def test_a_new_child_is_booting_with_its_read_end_watched():
    rig = Rig()
    assert rig.child.state == BOOTING and rig.child.deadline() == NOW + 10.0
    assert rig.sel.keys[10].data is TAG and 11 not in rig.sel.keys


def test_ready_is_reported_once():
    rig = Rig()
    assert rig.says(wire.Ready(42, 3)) == [Readied()]
    assert rig.child.ready and rig.child.boot_deadline is None
    assert rig.says(wire.Ready(42, 3)) == []


def test_run_sends_the_job_and_arms_both_deadlines():
    rig = busy()
    (run,) = rig.sent()
    assert (run.id, run.kind, run.queue, run.attempt, run.args) == (1, "pool_noop", "q", 2,
                                                                    {"a": 1})
    assert rig.child.state == BUSY
    assert (rig.child.job_deadline, rig.child.beat_deadline) == (NOW + 2.0, NOW + 5.0)
    assert rig.child.deadline() == NOW + 2.0


def test_done_reports_the_result_and_frees_the_job():
    rig = busy()
    news = rig.says(wire.Done(1, b'{"x":1}'), now=NOW + 0.5)
    assert news == rig.outcomes
    (started, done) = rig.outcomes  # no START came: the answer implies it
    assert isinstance(started, JobStarted) and started.job.id == 1
    assert isinstance(done, JobDone) and done.result_json == '{"x":1}'
    assert done.duration == pytest.approx(0.5)
    assert rig.child.job is None and rig.child.jobs_done == 1


def test_a_last_answer_says_so():
    rig = busy()
    (_started, failed, leaving) = rig.says(wire.Failed(1, "error", "boom", "tb", last=True))
    assert leaving == Leaving() and rig.outcomes == [_started, failed]
    assert isinstance(failed, JobFailed) and (failed.kind, failed.traceback) == ("error", "tb")


def test_heartbeats_move_the_deadline_and_carry_progress_of_its_own_job_only():
    rig = busy()
    rig.says(wire.Heartbeat(1, {"done": 1}), wire.Heartbeat(7, {"done": 9}), now=NOW + 4)
    assert rig.child.beat_deadline == NOW + 9.0
    assert [(type(o), o.progress) for o in rig.outcomes] == [(JobProgress, {"done": 1})]


def test_boot_error_is_kept_for_the_exit_message():
    rig = Rig()
    rig.says(wire.BootError("import", "No module named 'x'"))
    assert rig.child.boot_error == "import error: No module named 'x'"


@pytest.mark.parametrize("garbage", [
    wire.HEADER.pack(wire.VERSION, wire.DONE, 0, 10**9),  # over the cap
    wire.encode_raw(wire.HEARTBEAT, b"[1]"),  # not an object
])
def test_a_frame_that_cannot_be_trusted_closes_the_read_end(garbage):
    rig = busy(max_frame_bytes=1000)
    (broken,) = rig.says(garbage)
    assert isinstance(broken, Broken) and broken.why == rig.child.broken
    assert rig.child.broken and not rig.child.read_open
    assert 10 in rig.os.closed and 10 not in rig.sel.keys


def test_end_of_file_closes_the_read_end():
    rig = Rig()
    rig.os.eof.add(10)
    assert rig.says() == []
    assert 10 in rig.os.closed and not rig.child.read_open


def test_a_full_pipe_queues_and_flushes_on_writable():
    rig = Rig()
    rig.os.write_budget = 4
    rig.says(wire.Ready(42, 3))
    rig.child.run(job(1), NOW)
    assert rig.sel.keys[11].data is TAG
    rig.os.write_budget = None
    rig.child.flush()
    assert 11 not in rig.sel.keys and [m.id for m in rig.sent()] == [1]


def test_stop_gives_a_booting_child_its_boot_time_too():
    rig = Rig()
    rig.child.stop(NOW)
    assert rig.child.state == STOPPING and rig.child.exit_deadline == NOW + 13.0
    assert rig.sent() == [wire.Stop()]


def test_sigterm_then_escalation_and_no_second_sigterm():
    rig = busy()
    rig.child.kill(signal.SIGTERM, NOW, "timeout", "too slow")
    assert rig.os.signals == [(42, signal.SIGTERM), (42, signal.SIGCONT)]
    assert rig.child.state == KILLED and rig.child.exit_deadline == NOW + 3.0
    assert not rig.child.can_signal(signal.SIGTERM) and rig.child.can_signal(signal.SIGKILL)
    rig.child.escalate()
    assert rig.os.signals[-1] == (42, signal.SIGKILL) and rig.child.exit_deadline is None
    assert not rig.child.can_signal(signal.SIGKILL)


def test_close_reads_a_last_answer_before_judging():
    rig = busy()
    rig.os.inbox.setdefault(10, bytearray()).extend(wire.Done(1, b"7").encode())
    rig.os.eof.add(10)
    records = rig.child.close(NOW + 1, "child 42 killed by SIGSEGV")
    assert [type(o) for o in records] == [JobStarted, JobDone]  # the answer says so
    assert {10, 11} <= rig.os.closed and not rig.sel.keys
    assert rig.os.signals[-1] == (42, signal.SIGKILL)  # whatever the group left
    assert rig.child.state == DEAD


def test_close_reports_the_started_job_with_the_kill_s_kind_or_as_crashed():
    rig = busy()
    rig.says(wire.Start(1))
    rig.child.kill(signal.SIGTERM, NOW, "timeout", "ran past its 2.0 s timeout")
    rig.os.eof.add(10)
    (failed,) = rig.child.close(NOW + 3, "child 42 killed by SIGTERM")
    assert (failed.kind, failed.message) == ("timeout", "ran past its 2.0 s timeout")
    other = busy()
    other.says(wire.Start(1))
    other.os.eof.add(10)
    (failed,) = other.child.close(NOW, "child 42 exited with code 3")
    assert (failed.kind, failed.message) == ("crashed", "child 42 exited with code 3")


def test_an_answer_for_a_job_it_was_not_given_is_dropped_with_a_warning(caplog):
    rig = busy()
    with caplog.at_level(logging.WARNING, logger="test.child"):
        news = rig.says(wire.Done(99, b'"stray"'), wire.Failed(98, "error", "stray"))
    assert news == [] and rig.outcomes == []
    assert rig.child.job is not None and rig.child.jobs_done == 0
    assert "job 99 while running job 1" in caplog.text
    assert [type(n) for n in rig.says(wire.Done(1, b'"mine"'))] == [JobStarted, JobDone]


def test_a_heartbeat_for_another_job_is_no_sign_of_life():
    rig = busy()
    rig.says(wire.Heartbeat(99), now=NOW + 4)
    assert rig.child.beat_deadline == NOW + 5.0


def test_a_job_whose_run_frame_would_be_over_the_cap_is_not_sent():
    rig = Rig(max_frame_bytes=100)
    rig.says(wire.Ready(42, 3))
    big = ClaimedJob(1, "pool_noop", "q", 1, 5, 0, None, '{"a": "' + "é" * 100 + '"}')
    assert not rig.child.run(big, NOW)
    assert rig.child.job is None and 11 not in rig.os.written
    failed = rig.child.too_large(big)
    assert (failed.kind, failed.terminal) == ("args", True)
    assert "209 bytes" in failed.message and "100-byte" in failed.message


def test_one_read_says_its_news_in_the_order_the_child_said_them():
    rig = busy()
    rig.child.run(job(2), NOW)
    rig.child.push()
    news = rig.says(wire.Start(1), wire.Done(1, b"1"), wire.Start(2),
                    wire.Heartbeat(2, {"done": 1}), wire.Done(2, b"2", last=True))
    assert [(type(n).__name__, getattr(getattr(n, "job", None), "id", None))
            for n in news] == [("JobStarted", 1), ("JobDone", 1), ("JobStarted", 2),
                               ("JobProgress", 2), ("JobDone", 2), ("Leaving", None)]
    assert rig.child.job is None and rig.child.jobs_done == 2


def test_a_start_that_crossed_a_skip_is_news_not_a_start():
    rig = busy()
    rig.child.run(job(2), NOW)
    assert rig.child.skip(2, NOW).id == 2
    news = rig.says(wire.Start(1), wire.Done(1, b"1"), wire.Start(2))
    assert news[-1] == CrossedSkip(2)
    assert [type(n) for n in news[:-1]] == [JobStarted, JobDone]


def test_a_recalled_job_comes_back_on_skipped_or_runs_on_start():
    rig = busy()
    rig.child.run(job(2), NOW)
    rig.child.run(job(3), NOW)
    assert rig.child.recall(2, "queue q paused") and rig.child.recall(3, "queue q paused")
    news = rig.says(wire.Start(1), wire.Done(1, b"1"), wire.Skipped(2), wire.Start(3))
    (_s1, _d1, returned, started) = news
    assert (returned.job.id, returned.keep, returned.release) == (2, True, True)
    assert isinstance(started, JobStarted) and started.job.id == 3 and rig.child.started
