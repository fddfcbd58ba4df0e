"""The pool's policy against a fake OS and a fake clock: no process is forked here.

The fake OS hands out pids and fds, records every signal and write, and lets a test
play a child: queue bytes on the parent's read end, report an exit from waitpid.
"""

from __future__ import annotations

import selectors
import signal

import pool_handlers  # noqa: F401  (registers the pool_* kinds the parent looks up)
import pytest
from pool_fakes import Harness, exited, signalled, started

from shared import wire
from shared.exitcodes import CHILD_IMPORT_ERROR, CHILD_OK, CHILD_RECYCLE
from shared.jobs import ClaimedJob
from supervisor.pool import ChildEvent, JobDone, JobFailed, JobProgress, PoolHalted

pytestmark = pytest.mark.timeout(10)


def job(job_id: int = 1, kind: str = "pool_noop", timeout: float | None = None) -> ClaimedJob:
    return ClaimedJob(job_id, kind, "default", 1, 5, 0, timeout, "{}")


def busy_pid(h: Harness, job_id: int) -> int:
    return h.pool._in_flight[job_id].pid


def test_start_forks_size_children_and_they_become_idle_on_ready():
    h = Harness(size=3)
    h.pool.start()
    assert len(h.pids()) == 3 and h.pool.idle_count() == 0
    assert h.pool.next_deadline() == h.clock.now + 10.0
    h.ready()
    assert h.pool.idle_count() == 3 and h.pool.alive() == 3
    spawned = [o for o in h.take(ChildEvent) if o.what == "spawned"]
    assert sorted(o.worker_no for o in spawned) == [1, 2, 3]


def test_dispatch_sends_run_only_to_idle_children():
    h = started()
    assert h.pool.dispatch(job(1)) and h.pool.dispatch(job(2))
    assert not h.pool.dispatch(job(3))
    assert h.pool.busy_count() == 2 and h.pool.idle_count() == 0
    assert {j.id for j in h.pool.running()} == {1, 2}
    frames = [f for pid in h.pids() for f in h.sent(pid)]
    assert sorted(f.json()["id"] for f in frames if f.type == wire.RUN) == [1, 2]


def test_done_reports_result_text_and_frees_the_child():
    h = started(size=1)
    h.pool.dispatch(job(1))
    h.clock.now += 0.25
    h.says(h.pids()[0], wire.Done(1, b'{"ok":true}').encode())
    (done,) = h.take(JobDone)
    assert done.result_json == '{"ok":true}' and done.duration == pytest.approx(0.25)
    assert h.pool.idle_count() == 1 and h.pool.running() == []


def test_failed_from_child_keeps_kind_traceback_and_terminality():
    h = started(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.says(pid, wire.Failed(1, "binding", "bad").encode())
    h.pool.dispatch(job(2))
    h.says(pid, wire.Failed(2, "retry", "later", "tb", 7.5).encode())
    first, second = h.take(JobFailed)
    assert (first.kind, first.terminal) == ("binding", True)
    assert (second.kind, second.terminal, second.retry_delay) == ("retry", False, 7.5)


def test_boot_deadline_kills_and_counts_as_a_boot_failure():
    h = Harness(size=1, boot_timeout=10.0)
    h.pool.start()
    pid = h.pids()[0]
    h.advance(9.9)
    assert h.signals_to(pid) == []
    h.advance(0.2)
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signalled(signal.SIGKILL))
    events = [o.what for o in h.take(ChildEvent)]
    assert "boot_failed" in events
    assert len(h.pids()) == 1 and h.pids()[0] != pid  # replaced


def test_job_timeout_sigterm_then_sigkill_after_grace():
    h = started(size=1, kill_grace=3.0)
    pid = h.pids()[0]
    h.pool.dispatch(job(1, timeout=2.0))
    assert h.pool.next_deadline() == h.clock.now + 2.0
    h.advance(1.9)
    assert h.signals_to(pid) == []
    h.advance(0.2)
    # SIGCONT so that a stopped child receives the SIGTERM.
    assert h.signals_to(pid) == [signal.SIGTERM, signal.SIGCONT]
    assert len(h.pids()) == 2  # the replacement is forked at once
    h.advance(2.9)
    assert h.signals_to(pid) == [signal.SIGTERM, signal.SIGCONT]
    h.advance(0.2)
    assert h.signals_to(pid)[-1] == signal.SIGKILL
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == "timeout" and failed.message == "ran past its 2.0 s timeout"
    assert not failed.terminal


def test_the_job_s_resolved_timeout_arms_its_deadline():
    h = started(size=2)
    h.pool.dispatch(job(1, timeout=0.3))
    assert h.pool._in_flight[1].job_deadline == pytest.approx(h.clock.now + 0.3)
    h.pool.dispatch(job(2, timeout=None))
    assert h.pool._in_flight[2].job_deadline is None


def test_heartbeats_extend_the_deadline_and_silence_means_hung():
    h = started(size=1, heartbeat_timeout=5.0)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    for _ in range(4):
        h.clock.now += 4.0
        h.says(pid, wire.Heartbeat(1).encode())
        h.pool.tick()
    assert h.signals_to(pid) == []
    h.advance(5.1)
    assert h.signals_to(pid)[:1] == [signal.SIGTERM]
    h.exits(pid, signalled(signal.SIGTERM))
    (failed,) = h.take(JobFailed)
    assert (failed.kind, failed.message) == ("hung", "no heartbeat for 5.0 s")


def test_progress_arrives_as_job_progress_for_the_running_job_only():
    h = started(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.says(pid, wire.Heartbeat(1, {"done": 1, "total": 3}).encode())
    h.says(pid, wire.Heartbeat(99, {"done": 2}).encode())
    (progress,) = h.take(JobProgress)
    assert progress.job.id == 1 and progress.progress == {"done": 1, "total": 3}


def test_last_answer_means_no_more_dispatch_and_recycle_is_not_a_crash():
    h = started(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.says(pid, wire.Done(1, b"1", last=True).encode())
    assert h.pool.idle_count() == 0
    assert len(h.pids()) == 1
    h.pool.tick()  # forks the replacement
    assert len(h.pids()) == 2
    h.exits(pid, exited(CHILD_RECYCLE))
    assert h.take(JobFailed) == []
    assert any(o.what == "recycled" for o in h.outcomes if isinstance(o, ChildEvent))
    assert len([o for o in h.outcomes if isinstance(o, JobDone)]) == 1


def test_max_jobs_is_jittered_per_child():
    h = Harness(size=8, max_jobs_per_child=100, max_jobs_jitter=0.1)
    h.pool.start()
    limits = [h.child(pid).max_jobs for pid in h.pids()]
    assert all(90 <= n <= 110 for n in limits)
    assert len(set(limits)) > 1


def test_parent_stops_a_child_at_its_job_limit_even_without_the_flag():
    h = started(size=1, max_jobs_per_child=1, max_jobs_jitter=0.0)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.says(pid, wire.Done(1, b"null").encode())
    assert [f.type for f in h.sent(pid)] == [wire.RUN, wire.STOP]
    assert h.pool.idle_count() == 0


def test_done_in_the_pipe_of_a_dead_child_still_counts():
    h = started(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.says(pid, wire.Done(1, b'"made it"').encode(), deliver=False)
    h.exits(pid, signalled(signal.SIGSEGV))
    assert [o.result_json for o in h.take(JobDone)] == ['"made it"']
    assert h.take(JobFailed) == []


def test_crash_while_busy_reports_how_and_replaces():
    h = started(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.exits(pid, signalled(signal.SIGSEGV))
    (failed,) = h.take(JobFailed)
    assert failed.kind == "crashed" and failed.message == f"child {pid} killed by SIGSEGV"
    assert h.pids() != [pid] and len(h.pids()) == 1
    h.ready()
    assert h.pool.idle_count() == 1


def test_exit_code_appears_in_the_crash_message():
    h = started(size=1)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.exits(pid, exited(3))
    (failed,) = h.take(JobFailed)
    assert failed.message == f"child {pid} exited with code 3"


def test_crash_loop_halts_with_the_childs_own_words():
    h = Harness(size=2, crash_loop_limit=3)
    h.pool.start()
    forks = 0
    with pytest.raises(PoolHalted, match="No module named 'nowhere'"):
        for _ in range(10):
            pid = h.pids()[0]
            h.says(pid, wire.BootError(
                "import", "ModuleNotFoundError: No module named 'nowhere'").encode())
            h.exits(pid, exited(CHILD_IMPORT_ERROR))
            forks += 1
            h.pool.tick()
    assert forks == 3
    alive = len(h.pids())
    h.pool.tick()  # raised once; later ticks go on enforcing deadlines
    assert len(h.pids()) == alive  # no forking once halted
    assert "crash loop" in h.pool.halted


def test_a_ready_child_resets_the_crash_streak():
    h = Harness(size=1, crash_loop_limit=3, crash_loop_window=1.0)
    h.pool.start()
    for _ in range(10):
        pid = h.pids()[0]
        h.exits(pid, exited(CHILD_IMPORT_ERROR))
        h.clock.now += 2.0  # outside the window
        h.ready(h.pids()[0])
        h.pool.dispatch(job(1))
        h.exits(h.pids()[0], signalled(signal.SIGKILL))  # crashed after READY: not boot
        h.take()
        h.clock.now += 2.0
        h.pool.tick()


def test_boot_failures_within_the_window_halt_even_with_readies_between():
    h = Harness(size=1, crash_loop_limit=3, crash_loop_window=60.0)
    h.pool.start()
    with pytest.raises(PoolHalted, match="crash loop"):
        for _ in range(3):
            h.exits(h.pids()[0], signalled(signal.SIGSEGV))  # dies at boot
            h.pool.tick()
            h.ready(h.pids()[0])  # its replacement boots: the streak resets
            h.exits(h.pids()[0], signalled(signal.SIGKILL))  # and dies later
            h.clock.now += 1.0
            h.pool.tick()


def test_stop_sends_stop_to_every_child_now_and_busy_ones_finish_their_job():
    h = started(size=2)
    a, b = h.pids()
    h.pool.dispatch(job(1))
    busy = busy_pid(h, 1)
    idle = b if busy == a else a
    h.pool.stop()
    assert [f.type for f in h.sent(idle)] == [wire.STOP]
    # STOP at once, so a busy child starts nothing it may hold queued.
    assert [f.type for f in h.sent(busy)] == [wire.RUN, wire.STOP]
    h.advance(4.0)  # past the kill grace: the running job is not cut short
    assert h.signals_to(busy) == []
    h.says(busy, wire.Done(1, b"null").encode())
    assert [f.type for f in h.sent(busy)] == [wire.RUN, wire.STOP]
    h.exits(idle, exited(CHILD_OK))
    h.exits(busy, exited(CHILD_OK))
    h.pool.tick()
    assert h.pool.alive() == 0 and h.pids() == []


def test_a_child_that_ignores_stop_is_killed_after_the_grace():
    h = started(size=1, kill_grace=3.0)
    pid = h.pids()[0]
    h.pool.stop()
    h.advance(3.1)
    assert h.signals_to(pid) == [signal.SIGKILL]


def test_cancel_tells_the_job_then_kills_the_group_and_reports_cancelled():
    h = started(size=2)
    h.pool.dispatch(job(1))
    pid = busy_pid(h, 1)
    assert not h.pool.cancel(42)
    assert h.pool.cancel(1)
    assert h.signals_to(pid) == []  # told first (STOPPING): it may hand the job back
    assert h.pool.cancel(1)  # a second cancel keeps the first one's deadline
    assert h.pool.next_deadline() <= h.clock.now + h.pool.settings.kill_grace
    h.clock.now += h.pool.settings.kill_grace
    h.pool.tick()
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == "cancelled"


def test_interrupt_all_sigkills_busy_children_and_reports_each_job():
    h = started(size=3)
    h.pool.dispatch(job(1))
    h.pool.dispatch(job(2))
    busy = [busy_pid(h, 1), busy_pid(h, 2)]
    h.pool.interrupt_all("shutdown")
    for pid in busy:
        assert h.signals_to(pid) == [signal.SIGKILL]
        h.exits(pid, signalled(signal.SIGKILL))
    assert sorted((o.job.id, o.kind) for o in h.take(JobFailed)) == [(1, "shutdown"),
                                                                     (2, "shutdown")]


def test_kill_all_kills_every_group_and_forks_nothing():
    h = started(size=2)
    h.pool.dispatch(job(1))
    pids = h.pids()
    h.pool.kill_all()
    for pid in pids:
        assert h.signals_to(pid) == [signal.SIGKILL]
        h.exits(pid, signalled(signal.SIGKILL))
    h.pool.tick()
    assert h.pool.alive() == 0
    assert [o.kind for o in h.take(JobFailed)] == ["shutdown"]


def test_unknown_pids_are_reaped_quietly():
    h = started(size=1)
    h.exits(4242, exited(0))
    assert h.pool.alive() == 1 and h.take(JobFailed) == []


def test_resize_grows_now_and_shrinks_idle_first():
    h = started(size=2)
    h.pool.resize(4)
    assert len(h.pids()) == 4
    h.ready()
    h.pool.dispatch(job(1))
    busy = busy_pid(h, 1)
    h.pool.resize(1)
    stopped = [pid for pid in h.pids() if [f.type for f in h.sent(pid)] == [wire.STOP]]
    assert len(stopped) == 3 and busy not in stopped
    assert h.pool.size() == 1


def test_recycle_all_replaces_idle_now_and_busy_after_their_job():
    h = started(size=2)
    h.pool.dispatch(job(1))
    busy = busy_pid(h, 1)
    old = set(h.pids())
    h.pool.recycle_all()
    assert len(set(h.pids()) - old) == 1  # the idle one's replacement
    h.says(busy, wire.Done(1, b"null").encode())
    assert [f.type for f in h.sent(busy)] == [wire.RUN, wire.STOP]
    h.pool.tick()
    assert len(set(h.pids()) - old) == 2


def test_recycle_all_also_retires_a_child_still_booting():
    # It was forked before the reload: once READY it must stop, not take a job.
    h = Harness(size=1)
    h.pool.start()
    booting = h.pids()[0]
    h.pool.recycle_all()
    h.ready(booting)
    assert [f.type for f in h.sent(booting)] == [wire.STOP]
    assert h.pool.idle_count() == 0
    h.pool.tick()
    assert len(set(h.pids()) - {booting}) == 1  # its replacement


def test_a_full_pipe_is_flushed_when_writable():
    h = started(size=1)
    pid = h.pids()[0]
    h.os.write_budget = 5
    h.pool.dispatch(job(1))
    child = h.child(pid)
    assert child.write_fd in h.sel.keys  # write interest registered
    h.os.write_budget = None
    h.pool.handle_event(h.sel.keys[child.write_fd], selectors.EVENT_WRITE)
    assert child.write_fd not in h.sel.keys
    assert [f.json()["id"] for f in h.sent(pid)] == [1]


def test_a_broken_frame_kills_the_child_and_fails_its_job():
    h = started(size=1, max_frame_bytes=1000)
    pid = h.pids()[0]
    h.pool.dispatch(job(1))
    h.says(pid, wire.HEADER.pack(wire.VERSION, wire.DONE, 0, 10**9))
    assert h.signals_to(pid) == [signal.SIGKILL]
    h.exits(pid, signalled(signal.SIGKILL))
    (failed,) = h.take(JobFailed)
    assert failed.kind == "crashed" and "wire protocol" in failed.message


def test_reaped_children_leave_no_fd_or_selector_key_behind():
    h = started(size=2)
    for pid in h.pids():
        child = h.child(pid)
        fds = {child.read_fd, child.write_fd}
        h.exits(pid, signalled(signal.SIGKILL))
        assert fds <= h.os.closed
        assert not fds & set(h.sel.keys)


def test_args_too_large_for_a_frame_fail_at_once_and_the_child_stays_idle():
    h = started(size=1, max_frame_bytes=200)
    big = ClaimedJob(1, "pool_noop", "default", 1, 5, 0, None, '{"a": "' + "x" * 300 + '"}')
    assert h.pool.dispatch(big)
    (failed,) = h.take(JobFailed)
    assert (failed.job.id, failed.kind, failed.terminal) == (1, "args", True)
    assert h.pool.idle_count() == 1 and h.pool.busy_count() == 0
    assert h.sent(h.pids()[0]) == []
    assert h.pool.dispatch(job(2)) and h.pool.busy_count() == 1
