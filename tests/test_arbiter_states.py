"""The arbiter's state machine on its own: RUNNING -> DRAINING -> STOPPING, driven by
signals, the grace, a burst that ran out of work and a crash loop, against a fake engine
and a fake pool (no process forked, no database). What each state asks of the engine
and the pool, and in which order, is what the real-process tests
(``test_run_signals.py``, ``test_edges_signals.py``) rely on."""

from __future__ import annotations

import io
import os
import signal
from collections import Counter

import pytest

from shared import jobs
from supervisor import arbiter as arbiter_module
from supervisor.arbiter import DRAINING, REAP_NET, RUNNING, STOP_TIMEOUT, STOPPING, Arbiter
from supervisor.config import RunConfig
from supervisor.observe.progress import BurstProgress
from supervisor.pool import PoolHalted
from supervisor.pool.pool import QuietOutlook
from supervisor.signals import Received

pytestmark = pytest.mark.timeout(10)

GRACE = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeLedger:
    def __init__(self) -> None:
        self.finished: Counter[str] = Counter()
        self.waiting: dict[str, int] = {}  # jobs claimed for children still to come

    def waiting_counts(self) -> dict[str, int]:
        return dict(self.waiting)

    def has_waiting(self) -> bool:
        return any(self.waiting.values())


class FakeReporter:
    def __init__(self) -> None:
        self.discard_reasons: Counter[str] = Counter()


class FakeDatabase:
    """A database that never answers: ``call`` gives its default."""

    def call(self, what, default, operation: str = "query"):
        return default


class FakeEngine:
    """What the arbiter asks of the engine, written into the shared ``calls``."""

    def __init__(self, calls: list) -> None:
        self.calls = calls
        self.ledger = FakeLedger()
        self.reporter = FakeReporter()
        self.db = FakeDatabase()
        self.claim_in_flight = False
        self.burst_finished = False
        self.database_up = True
        self.to_release = 0
        self.ticks = 0
        self.on_tick = None  # called at each tick (a test's way to act mid-loop)
        self.due_in = 0.0  # the next deadline, from now: always due unless a test says
        self.urgent: list[int] = []  # the claim's socket while one is out
        self.margin = 0.0  # work the children keep for a claim's round trips
        self.on_count = None  # called at each count for the progress line

    def watch_signals(self, wakeup_fd: int) -> None:
        pass  # the real engine lets the wakeup pipe end a wait for the database

    def open(self, check_schema: bool = False) -> None:
        self.calls.append("engine.open")

    def close(self, pool, now: float) -> None:
        self.calls.append("engine.close")

    def tick(self, now: float, pool) -> None:
        self.ticks += 1
        if self.on_tick is not None:
            self.on_tick(self.ticks)

    def next_deadline(self, now: float, pool) -> float:
        return now + self.due_in  # by default always due: the loop never waits in select

    def urgent_fds(self) -> list[int]:
        return list(self.urgent)

    def claim_margin(self) -> float:
        return self.margin

    def drain(self, now: float) -> int:
        self.calls.append("engine.drain")
        return self.to_release

    def notify_drain(self, pool, grace: float) -> int:
        self.calls.append("engine.notify_drain")
        return 0

    def collect(self, pool, now: float) -> None:
        self.calls.append("engine.collect")

    def flush(self, now: float) -> None:
        self.calls.append("engine.flush")

    def waiting(self) -> None:
        return None  # what waits for a run_at or dependencies: not known here

    def queue_counts(self) -> dict:
        if self.on_count is not None:
            self.on_count()
        return {}


class FakePool:
    """Children are numbers: ``alive`` until reaped, ``busy`` of them running jobs."""

    def __init__(self, calls: list, size: int = 2) -> None:
        self.calls = calls
        self.target = size
        self.alive_n = 0
        self.busy = 0
        self.halt: str | None = None
        self.reaps = 0  # looks for exited children
        self.quiet = 0.0  # how long every child has queued work for
        self.answer_rate = 1000.0  # answers a second the children send meanwhile

    def start(self) -> None:
        self.calls.append("pool.start")
        self.alive_n = self.target

    def stop(self) -> None:
        self.calls.append("pool.stop")

    def kill_all(self) -> None:
        self.calls.append("pool.kill_all")

    def interrupt_all(self, kind: str = jobs.FAIL_SHUTDOWN) -> None:
        self.calls.append(f"pool.interrupt_all({kind})")

    def recycle_all(self) -> None:
        self.calls.append("pool.recycle_all")

    def resize(self, n: int) -> None:
        self.calls.append(f"pool.resize({n})")
        self.target = n

    def reap(self) -> None:
        self.reaps += 1

    def tick(self) -> None:
        if self.halt is not None:
            why, self.halt = self.halt, None
            raise PoolHalted(why)

    def alive(self) -> int:
        return self.alive_n

    def busy_count(self) -> int:
        return self.busy

    def idle_count(self) -> int:
        return self.alive_n - self.busy

    def size(self) -> int:
        return self.target

    def native_jobs(self, now: float) -> list:
        return []  # no child is busy in native code here

    def next_deadline(self) -> float | None:
        return None

    def quiet_outlook(self) -> QuietOutlook:
        return QuietOutlook(self.quiet, self.answer_rate)


class Rig:
    def __init__(self, **config) -> None:
        self.calls: list[str] = []
        self.clock = Clock()
        self.engine = FakeEngine(self.calls)
        self.pool = FakePool(self.calls)
        settings = {"children": 2, "grace": GRACE, "otel": False, **config}
        self.arbiter = Arbiter(RunConfig(**settings), "dsn-not-used", ["default"], ["k"],
                               clock=self.clock, engine=self.engine, pool=self.pool)
        self.pool.start()  # as run() does before its first turn
        self.calls.clear()

    def signal(self, sig: int) -> None:
        """A signal the handler recorded, handled at the next turn."""
        self.arbiter.inbox.received.append(Received(sig, self.clock.now))
        self.arbiter.turn()

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.arbiter.turn()

    @property
    def state(self) -> str:
        return self.arbiter.state

    def finished(self) -> bool:
        return self.arbiter._finished()


@pytest.fixture(autouse=True)
def _no_process_title(monkeypatch):
    monkeypatch.setattr(arbiter_module, "setproctitle", lambda title: None)


def test_running_turns_until_told_otherwise():
    rig = Rig()
    for _ in range(3):
        rig.advance(1.0)
    assert rig.state == RUNNING and not rig.finished()
    assert rig.calls == [] and rig.engine.ticks == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_drains_the_engine_then_stops_the_pool(sig):
    rig = Rig()
    rig.engine.to_release = 3
    rig.pool.busy = 1
    rig.signal(sig)
    assert rig.state == DRAINING
    # Claim nothing more, then STOP, then tell the jobs that cannot finish in the grace.
    assert rig.calls == ["engine.drain", "pool.stop", "engine.notify_drain"]
    assert rig.arbiter.drain_deadline == rig.clock.now + GRACE
    assert not rig.finished()  # its children are not reaped yet


def test_a_drain_ends_once_every_child_is_reaped_and_no_claim_is_in_flight():
    rig = Rig()
    rig.signal(signal.SIGTERM)
    rig.pool.alive_n = 0
    rig.engine.claim_in_flight = True  # its answer must be booked (released) first
    rig.advance(1.0)
    assert rig.state == DRAINING and not rig.finished()
    rig.engine.claim_in_flight = False
    assert rig.finished()
    assert "pool.kill_all" not in rig.calls  # nobody was killed


def test_a_drain_never_waits_forever_for_a_claim_a_hung_database_never_answers():
    rig = Rig()
    rig.signal(signal.SIGTERM)
    rig.pool.alive_n = 0
    rig.engine.claim_in_flight = True
    rig.advance(GRACE + STOP_TIMEOUT - 1)
    assert not rig.finished()
    rig.clock.now += 1
    assert rig.finished()


def test_the_end_of_the_grace_stops_only_a_drain_that_still_runs_jobs():
    rig = Rig()
    rig.signal(signal.SIGTERM)
    rig.pool.busy = 0
    rig.advance(GRACE)
    assert rig.state == DRAINING  # nothing runs: the children are on their way out
    rig.pool.busy = 1
    rig.advance(0.5)
    assert rig.state == STOPPING
    assert rig.calls[-5:] == ["engine.drain", f"pool.interrupt_all({jobs.FAIL_SHUTDOWN})",
                              "pool.kill_all", "engine.collect", "engine.flush"]


@pytest.mark.parametrize(("second", "after"), [(signal.SIGINT, 0.2), (signal.SIGTERM, 1.5)])
def test_a_second_stop_signal_while_draining_stops_now(second, after):
    rig = Rig()
    rig.pool.busy = 2
    rig.signal(signal.SIGTERM)
    rig.calls.clear()
    rig.clock.now += after  # past the window in which it would be the same stop
    rig.signal(second)
    assert rig.state == STOPPING
    # Running jobs are interrupted (attempt not counted) before the children die, and
    # what that reported is booked and written before the loop turns again.
    assert rig.calls == ["engine.drain", f"pool.interrupt_all({jobs.FAIL_SHUTDOWN})",
                         "pool.kill_all", "engine.collect", "engine.flush"]
    assert rig.arbiter.stop_deadline == rig.clock.now + STOP_TIMEOUT


@pytest.mark.parametrize(("first", "second", "after"), [
    (signal.SIGTERM, signal.SIGTERM, 0.0), (signal.SIGTERM, signal.SIGTERM, 0.05),
    (signal.SIGTERM, signal.SIGTERM, 0.9), (signal.SIGINT, signal.SIGINT, 0.0),
    (signal.SIGINT, signal.SIGTERM, 0.5)])
def test_the_same_stop_delivered_twice_is_one_drain(first, second, after):
    rig = Rig()
    rig.pool.busy = 2
    rig.signal(first)
    rig.calls.clear()
    rig.clock.now += after
    rig.signal(second)
    assert rig.state == DRAINING and rig.calls == []
    rig.signal(signal.SIGQUIT)  # QUIT still stops at once
    assert rig.state == STOPPING


def test_a_signal_after_a_burst_began_draining_is_the_first_stop_request():
    rig = Rig()
    rig.pool.busy = 1
    rig.arbiter.begin_drain()  # as a burst that ran out of work does
    rig.signal(signal.SIGTERM)
    assert rig.state == DRAINING
    rig.clock.now += 2.0
    rig.signal(signal.SIGTERM)
    assert rig.state == STOPPING


def test_quit_stops_at_once_from_running_and_later_signals_change_nothing():
    rig = Rig()
    rig.signal(signal.SIGQUIT)
    assert rig.state == STOPPING and "pool.stop" not in rig.calls
    before = list(rig.calls)
    rig.signal(signal.SIGTERM)
    rig.signal(signal.SIGQUIT)
    assert rig.state == STOPPING and rig.calls == before


def test_stopping_ends_when_the_children_are_reaped_or_at_the_stop_deadline():
    rig = Rig()
    rig.signal(signal.SIGQUIT)
    assert not rig.finished()
    rig.advance(STOP_TIMEOUT - 0.5)
    assert not rig.finished()  # a child that is never reaped is waited for this long
    rig.advance(0.5)
    assert rig.finished()
    reaped = Rig()
    reaped.signal(signal.SIGQUIT)
    reaped.pool.alive_n = 0
    assert reaped.finished()


def test_a_burst_that_ran_out_of_work_drains_itself():
    rig = Rig(burst=True)
    rig.advance(1.0)
    assert rig.state == RUNNING
    rig.engine.burst_finished = True
    rig.advance(1.0)
    assert rig.state == DRAINING
    assert rig.calls == ["engine.drain", "pool.stop", "engine.notify_drain"]
    assert rig.arbiter.exit_code == 0


def test_a_crash_loop_halts_with_exit_code_1_and_says_why():
    rig = Rig()
    why = "crash loop: 5 children died before they were ready"
    rig.pool.halt = why
    rig.advance(1.0)
    assert rig.state == STOPPING and rig.arbiter.exit_code == 1
    assert rig.arbiter.halt_reason == why
    assert rig.arbiter._unhealthy() == f"halted: {why}"
    assert "pool.kill_all" in rig.calls


def test_exits_are_reaped_on_sigchld_and_looked_for_every_half_second_besides():
    """Issue 43: a wait4 every turn was 4% of the parent's CPU per 100 ms job. SIGCHLD
    reaps at once; the look each turn is now made every ``REAP_NET`` while running (the
    net for an exit no signal reported), and every turn while draining."""
    rig = Rig()
    rig.advance(0.0)
    looked = rig.pool.reaps
    for _ in range(4):
        rig.advance(0.1)
    assert rig.pool.reaps == looked  # 0.4 s of turns: no look of their own
    rig.signal(signal.SIGCHLD)
    assert rig.pool.reaps == looked + 1  # the signal's reap
    rig.advance(REAP_NET)
    assert rig.pool.reaps == looked + 2  # the net
    rig.signal(signal.SIGTERM)
    draining = rig.pool.reaps
    for _ in range(3):
        rig.advance(0.01)
    assert rig.pool.reaps >= draining + 3


def test_ttin_and_ttou_resize_the_pool_never_below_one_child():
    rig = Rig()
    rig.signal(signal.SIGTTIN)
    assert rig.pool.size() == 3
    for _ in range(4):
        rig.signal(signal.SIGTTOU)
    assert rig.pool.size() == 1
    assert rig.calls == ["pool.resize(3)", "pool.resize(2)", "pool.resize(1)"]


def test_hup_recycles_the_children_only_if_the_code_reloaded(monkeypatch):
    from supervisor import apps

    rig = Rig()
    monkeypatch.setattr(apps, "reload_apps", lambda modules: True)
    rig.signal(signal.SIGHUP)
    assert rig.calls == ["pool.recycle_all"] and rig.state == RUNNING
    monkeypatch.setattr(apps, "reload_apps", lambda modules: False)
    rig.signal(signal.SIGHUP)
    assert rig.calls == ["pool.recycle_all"]  # a broken deploy keeps the children


def test_run_drains_on_a_real_sigterm_and_returns_0():
    """The whole loop, ``run()``: the signal goes through the real handler and wakeup
    fd; the pool is reaped empty two turns after its STOP."""
    calls: list[str] = []
    clock = Clock()
    engine = FakeEngine(calls)
    pool = FakePool(calls)
    arbiter = Arbiter(RunConfig(children=2, grace=GRACE, otel=False), "dsn-not-used",
                      ["default"], ["k"], clock=clock, engine=engine, pool=pool)

    stopped_at: list[int] = []

    def on_tick(n: int) -> None:
        clock.now += 0.1
        if n == 3:
            signal.raise_signal(signal.SIGTERM)
        if "pool.stop" in calls and not stopped_at:
            stopped_at.append(n)
        if stopped_at and n >= stopped_at[0] + 2:
            pool.alive_n = 0

    engine.on_tick = on_tick
    saved = {sig: signal.getsignal(sig) for sig in arbiter_module.HANDLED_SIGNALS}
    try:
        assert arbiter.run() == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert arbiter.state == DRAINING
    assert calls == ["pool.start", "engine.open", "engine.drain", "pool.stop",
                     "engine.notify_drain", "engine.close", "pool.kill_all"]


def test_run_forks_its_first_wave_before_it_connects_and_the_rest_once_a_job_is_placed():
    """Issue 48: the pool starts with its first wave (a few children per CPU) and forks
    nothing more while the first claim is out; once a child holds a job, the rest are
    forked a few per recount, and the loop turns at once to do it."""
    from shared.cpus import CpuCount
    from supervisor.pool.forkwaves import FIRST_WAVE_PER_CPU, FORKS_PER_RECOUNT

    calls: list[str] = []
    clock = Clock()
    engine = FakeEngine(calls)
    pool = FakePool(calls, size=16)
    seen: list[object] = []
    start = pool.start
    pool.start = lambda: (seen.append(("start", pool.fork_batch)), start())
    open_ = engine.open
    engine.open = lambda check_schema=False: (seen.append(("open", pool.fork_batch)),
                                              open_(check_schema))
    arbiter = Arbiter(RunConfig(children=16, grace=GRACE, otel=False,
                                cpus=CpuCount(2, "test")),
                      "dsn-not-used", ["default"], ["k"], clock=clock, engine=engine,
                      pool=pool)

    def on_tick(n: int) -> None:
        clock.now += 0.01
        if n == 1:
            engine.claim_in_flight = True  # the first claim is out
        elif n == 3:
            seen.append(("claim out", pool.fork_batch))
            engine.claim_in_flight = False
            engine.ledger.waiting = {"default": 16}  # answered, no child ready yet
        elif n == 5:
            seen.append(("waiting", pool.fork_batch))
            pool.busy = 1  # a READY came: the first job is in its pipe
        elif n == 6:
            due = arbiter.fork_waves.next_deadline()  # the loop turns at once to fork
            seen.append(("placed", pool.fork_batch, due is not None and due <= clock.now))
            signal.raise_signal(signal.SIGTERM)
        elif n > 8:
            pool.alive_n = 0

    engine.on_tick = on_tick
    saved = {sig: signal.getsignal(sig) for sig in arbiter_module.HANDLED_SIGNALS}
    try:
        assert arbiter.run() == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert seen == [("start", 2 * FIRST_WAVE_PER_CPU), ("open", 0), ("claim out", 0),
                    ("waiting", 0),
                    ("placed", FORKS_PER_RECOUNT, True)]


class SettleRig(Rig):
    """A rig whose signal pipe is real, with the waits of the loop's settle recorded
    instead of taken: (the fds it would watch, for how long)."""

    def __init__(self, monkeypatch) -> None:
        super().__init__()
        self.read_fd, self.write_fd = os.pipe()
        self.arbiter.inbox._read_fd = self.read_fd
        self.engine.due_in = 5.0
        self.waits: list[tuple[list[int], float]] = []
        monkeypatch.setattr(arbiter_module, "readable",
                            lambda fds, seconds: self.waits.append((list(fds), seconds)))
        # The loop's own wait returns at once: nothing is ready, and no turn sleeps.
        monkeypatch.setattr(self.arbiter.selector, "select", lambda timeout=None: [])

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


def test_the_loop_lets_answers_gather_while_every_pipe_holds_work_for_the_wait(monkeypatch):
    rig = SettleRig(monkeypatch)
    settle_max = rig.arbiter.config.tuning.settle_max
    try:
        rig.advance(0.0)
        assert rig.waits == []  # a child is idle, booting or holds one job: none
        rig.pool.quiet = 1.0  # every child has a second of work queued
        rig.advance(0.0)
        assert rig.waits == [([rig.read_fd], settle_max)]  # a signal ends it
        rig.waits.clear()
        rig.pool.quiet = 0.01  # the first pipe runs dry in 10 ms: half of it
        rig.advance(0.0)
        assert rig.waits == [([rig.read_fd], pytest.approx(0.005))]
        rig.waits.clear()
        rig.pool.quiet = 0.0015  # too little to save a turn
        rig.advance(0.0)
        assert rig.waits == []
        rig.pool.quiet = 1.0
        rig.pool.answer_rate = 50.0  # one answer expected in the 20 ms: no turn saved
        rig.advance(0.0)
        assert rig.waits == []
        rig.pool.answer_rate = 100.0  # two
        rig.advance(0.0)
        assert rig.waits == [([rig.read_fd], settle_max)]
        rig.waits.clear()
        rig.pool.answer_rate = 1000.0
        # No claim out: the children keep work for the round trips of a claim the wait
        # may hold back, 0.98 s of the 1 s here.
        rig.pool.quiet = 1.0
        rig.engine.margin = 0.98
        rig.advance(0.0)
        assert rig.waits == [([rig.read_fd], pytest.approx(0.01))]
        rig.waits.clear()
        rig.engine.margin = 1.5  # claims go back to back: no wait
        rig.advance(0.0)
        assert rig.waits == []
        rig.engine.urgent = [99]  # a claim is out: its answer ends the wait, no margin
        rig.advance(0.0)
        assert rig.waits == [([rig.read_fd, 99], settle_max)]
        rig.waits.clear()
        rig.engine.due_in = 0.003  # a deadline comes first
        rig.advance(0.0)
        assert rig.waits == [([rig.read_fd, 99], pytest.approx(0.003))]
        rig.waits.clear()
        rig.engine.due_in = 5.0
        rig.clock.now += 0.015  # the last turn ended 15 ms ago: 5 ms are left to wait
        rig.arbiter.turn()
        assert rig.waits == [([rig.read_fd, 99], pytest.approx(settle_max - 0.015))]
        rig.waits.clear()
        rig.arbiter.inbox.received.append(Received(signal.SIGTERM, rig.clock.now))
        rig.arbiter.turn()  # a signal waits: acted on without a settle, and it drains
        assert rig.waits == [] and rig.state == DRAINING
        rig.advance(0.0)
        assert rig.waits == []  # nor while draining
    finally:
        rig.close()



def test_a_slow_progress_count_is_asked_for_less_often():
    """The progress line's counts hold the loop: a count that takes 0.1 s (a backlog of
    millions) comes again 2 s later, not at the line's half second."""
    rig = Rig(burst=True)
    meter = BurstProgress(io.StringIO(), now=rig.clock.now, interactive=True)
    rig.arbiter.progress = meter
    counted: list[float] = []

    def count(seconds: float) -> None:
        counted.append(rig.clock.now)
        rig.clock.now += seconds

    rig.engine.on_count = lambda: count(0.0)
    rig.advance(0.5)
    assert len(counted) == 1 and meter.next_update == pytest.approx(counted[0] + 0.5)
    rig.engine.on_count = lambda: count(0.1)
    rig.advance(0.5)
    assert len(counted) == 2
    first_slow = counted[1]
    share = arbiter_module.PROGRESS_COUNT_SHARE
    assert meter.next_update == pytest.approx(first_slow + 0.1 / share)
    for _ in range(3):
        rig.advance(0.5)
    assert len(counted) == 2  # 1.5 s on: still not counted again
    rig.advance(0.5)
    assert len(counted) == 3
