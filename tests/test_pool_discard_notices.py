"""Who runs the ``on_discard`` hooks of a job the parent discarded (issue 45): the pool
sends its DISCARDED frame to an idle child, else to a busy one that is not leaving,
else keeps it for the next child to say READY. Over fakes: no process, no database."""

from __future__ import annotations

import pytest
from pool_fakes import Harness, started

from shared import wire
from shared.jobs import ClaimedJob


def _told(job_id: int = 9) -> wire.Discarded:
    return wire.Discarded(job_id, "k", "default", 2, 2, '{"n": 1}',
                          [{"attempt": 2, "kind": "crashed", "message": "killed by SIGSEGV"},
                           {"attempt": 2, "kind": "poison", "message": "the same crash"}])


def _discarded_to(h: Harness, pid: int) -> list[wire.Discarded]:
    return [wire.Discarded.decode(f) for f in h.sent(pid) if f.type == wire.DISCARDED]


def test_an_idle_child_is_told():
    h = started(size=2)
    h.pool.tell_discarded(_told())
    told = [d for pid in h.pids() for d in _discarded_to(h, pid)]
    assert len(told) == 1
    assert told[0].id == 9 and told[0].reason == "poison" and told[0].args() == {"n": 1}


def test_with_every_child_busy_one_that_is_not_leaving_is_told():
    h = started(size=2)
    for job_id in (1, 2):
        assert h.pool.dispatch(ClaimedJob(job_id, "k", "default", 1, 3, 0, None, "{}"))
    h.pool.tell_discarded(_told())
    assert sum(len(_discarded_to(h, pid)) for pid in h.pids()) == 1


def test_before_any_child_is_ready_the_notice_waits_for_the_first():
    h = Harness(size=1)
    h.pool.start()
    h.pool.tell_discarded(_told(7))
    h.pool.tell_discarded(_told(8))
    [pid] = h.pids()
    assert _discarded_to(h, pid) == []
    h.ready(pid)
    assert [d.id for d in _discarded_to(h, pid)] == [7, 8]


def test_the_frame_round_trips_and_a_bad_body_is_a_protocol_error():
    told = _told()
    [frame] = wire.FrameReader().feed(told.encode())
    assert wire.Discarded.decode(frame) == told
    bad = wire.FrameReader().feed(wire.encode(wire.DISCARDED, {"id": 1}))[0]
    with pytest.raises(wire.ProtocolError, match="DISCARDED"):
        wire.Discarded.decode(bad)
