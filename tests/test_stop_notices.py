"""Which running jobs a drain tells to stop (issue 28): those whose kind's measured 95th
percentile run time says they cannot finish within what is left of the grace, those past
it, and those of kinds never measured; and the percentile itself."""

from __future__ import annotations

import pytest

from shared.jobs import ClaimedJob
from supervisor.engine.notices import notify_drain
from supervisor.pool import RunTimes


def claimed(job_id: int, kind: str) -> ClaimedJob:
    return ClaimedJob(id=job_id, kind=kind, queue="q", attempt=1, max_attempts=3,
                      priority=0, timeout=None, args_json="{}")


class Running:
    """A pool's running jobs, each running for a given time; records what it is told."""

    def __init__(self, *jobs: tuple[ClaimedJob, float]) -> None:
        self.jobs = list(jobs)
        self.told: list[tuple[int, str, str, float | None]] = []

    def running_since(self):
        return self.jobs

    def notify(self, job_id, reason, kind, message, grace):
        self.told.append((job_id, reason, kind, grace))
        return True


def test_the_95th_percentile_is_the_nearest_rank_of_the_recent_runs():
    times = RunTimes()
    assert times.p95("k") is None
    for seconds in (1.0, 2.0):
        times.ran("k", "q", seconds)
    assert times.p95("k") is None  # too few to say
    for i in range(3, 101):
        times.ran("k", "q", float(i))
    assert times.p95("k") == 95.0
    for _ in range(200):  # only the last runs count
        times.ran("k", "q", 0.5)
    assert times.p95("k") == 0.5


def test_a_drain_tells_the_jobs_that_cannot_finish_in_the_grace_and_the_unmeasured():
    times = RunTimes()
    for _ in range(20):
        times.ran("short", "q", 1.0)
        times.ran("long", "q", 60.0)
    pool = Running((claimed(1, "short"), 0.5), (claimed(2, "long"), 50.0),
                   (claimed(3, "long"), 5.0), (claimed(4, "new"), 0.1),
                   (claimed(5, "short"), 2.0))
    assert notify_drain(pool, times, grace=25.0) == 3
    # 3 cannot finish in time, 4 was never measured, 5 overran its estimate.
    assert [(job_id, reason, kind, grace) for job_id, reason, kind, grace in pool.told] == [
        (3, "drain", "stopped", None), (4, "drain", "stopped", None),
        (5, "drain", "stopped", None)]
    pool.told.clear()
    pool.jobs = [(claimed(2, "long"), 50.0)]  # later in the drain: 10 s left to run, 5 left
    assert notify_drain(pool, times, grace=5.0) == 1 and pool.told[0][0] == 2


def test_a_notice_inside_the_runtimes_shielded_code_is_raised_as_it_leaves():
    # checkpoint() writes a frame and may read the pipe for its answer: Stopping raised
    # in there could tear the frame. The notice is held until the shielded code ends,
    # then raised in the handler. Deterministic: the signal is sent inside the shield.
    import os
    import signal

    from workers import Stopping
    from workers.context import JobContext
    from workers.stopnotice import NOTICE_SIGNAL, StopNotice

    before = signal.getsignal(NOTICE_SIGNAL)
    notice = StopNotice()
    context = JobContext(1, "k", "q", 1, {})
    steps = []

    def handler():
        with notice.shielded():
            notice.noticed(context, "drain", raising=True)  # SIGUSR2 to this thread
            os.kill(os.getpid(), 0)  # a few bytecodes: the signal is due by now
            steps.append("shielded code finished")
        steps.append("handler went on")  # must not happen: raised as the shield ends

    try:
        with pytest.raises(Stopping):
            notice.call(context, handler)
    finally:
        signal.signal(NOTICE_SIGNAL, before)
    assert steps == ["shielded code finished"]
