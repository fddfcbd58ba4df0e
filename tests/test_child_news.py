"""What a child's frames told the pool (``supervisor.pool.news``, issue 41): ``hear``
turns the bytes of one read into news in the order the child said them and moves the
child through its own verbs; ``Heard`` gathers what a read said of the child itself.
The words of ``ChildEventKind`` and ``Pressure`` are the ones logs, metrics and the
engine compare against, so they are pinned here.
"""

from __future__ import annotations

import logging

from pool_fakes import FakeOs, FakeSelector

from shared import wire
from shared.jobs import ClaimedJob
from shared.usage import Usage
from supervisor.pool import ChildEventKind, JobDone, JobStarted, PoolSettings
from supervisor.pool.news import Broken, Heard, Readied, hear
from supervisor.pool.pressure import KILL, NOTICE, ContainerGuard, Pressure
from supervisor.pool.process import BUSY, IDLE, ChildProcess

NOW = 100.0


def child() -> ChildProcess:
    return ChildProcess(42, 3, 10, 11, max_jobs=None, now=NOW,
                        settings=PoolSettings(size=1, boot_timeout=10.0,
                                              heartbeat_timeout=5.0, kill_grace=3.0),
                        oscalls=FakeOs(), selector=FakeSelector(), tag=object(),
                        log=logging.getLogger("test.news"))


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "q", 1, 5, 0, None, "{}")


def test_one_read_is_heard_in_the_order_it_was_said():
    c = child()
    news: list = []
    hear(c, wire.Ready(42, 3).encode(), NOW, news)
    assert news == [Readied()] and c.ready and c.boot_deadline is None
    c.run(job(1), NOW)
    c.run(job(2), NOW)
    news = []
    hear(c, wire.Start(1).encode() + wire.Done(1, b"null").encode()
         + wire.Start(2).encode(), NOW + 1, news)
    assert [(type(n), n.job.id) for n in news] == [(JobStarted, 1), (JobDone, 1),
                                                    (JobStarted, 2)]
    assert c.state == BUSY and c.jobs_done == 1 and c.started
    assert c.head is not None and c.head.job.id == 2


def test_a_bad_frame_keeps_what_came_before_it_and_breaks_the_child():
    c = child()
    c.run(job(1), NOW)
    news: list = []
    hear(c, wire.Start(1).encode() + wire.encode_raw(wire.HEARTBEAT, b"[1]")
         + wire.Done(1, b"null").encode(), NOW, news)
    assert isinstance(news[0], JobStarted) and isinstance(news[-1], Broken)
    assert len(news) == 2  # nothing after the bad frame is read
    assert c.broken == news[-1].why and not c.read_open


def test_a_read_that_said_nothing_of_the_child_is_heard_as_nothing():
    heard = Heard()
    assert not (heard.started or heard.answered or heard.gave_back or heard.leaving
                or heard.readied)
    assert heard.crossed is None and heard.broken is None
    heard.started = True
    assert not Heard().started  # a field set on one read stays with that read


def test_child_event_words_are_the_ones_logs_and_metrics_use():
    assert {kind.value for kind in ChildEventKind} == {
        "spawned", "ready", "native", "recalled", "stopping", "killed", "exited",
        "recycled", "boot_failed"}
    assert ChildEventKind.BOOT_FAILED == "boot_failed"
    assert {"exited": 1}[ChildEventKind.EXITED] == 1  # a str key finds it


def test_the_container_guard_says_its_level_as_a_pressure():
    guard = ContainerGuard(limit=1000 * 2**20)
    assert guard.level(None) is None and guard.level(0) is None
    assert guard.level(guard.notice_line) is Pressure.NOTICE is NOTICE
    assert guard.level(guard.limit) is Pressure.KILL is KILL
    assert KILL == "kill" and NOTICE == "notice"


def test_an_idle_child_is_not_moved_by_news_of_no_job():
    c = child()
    hear(c, wire.Ready(42, 3).encode(), NOW, [])
    c.become_idle()
    news: list = []
    hear(c, wire.Done(7, b"null").encode(), NOW, news)
    assert news == [] and c.state == IDLE and c.jobs_done == 0


def test_an_answer_read_with_its_start_lasts_the_childs_own_measure_at_least():
    # START and DONE in one read (a parent letting answers gather, or late): the
    # parent's reading is zero, the child measured 5 ms of handler.
    c = child()
    hear(c, wire.Ready(42, 3).encode(), NOW, [])
    c.run(job(1), NOW)
    news: list = []
    measured = Usage(0.001, 0.005, 1 << 20)
    hear(c, wire.Start(1).encode() + wire.Done(1, b"null", usage=measured).encode(),
         NOW + 1, news)
    done = next(n for n in news if type(n) is JobDone)
    assert done.duration == 0.005
    # Read apart, the parent's longer reading stands (it includes the frames' trip).
    c.run(job(2), NOW + 1)
    hear(c, wire.Start(2).encode(), NOW + 1, [])
    news = []
    hear(c, wire.Done(2, b"null", usage=measured).encode(), NOW + 1.5, news)
    done = next(n for n in news if type(n) is JobDone)
    assert done.duration == 0.5
