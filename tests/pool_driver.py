"""The loop the real-process pool tests drive a pool with, like the parent's: a
``Driver`` (a pool, a selector, the outcomes so far) and helpers that wait for a
condition with a deadline, never for a fixed time."""

from __future__ import annotations

import selectors
import time

from shared.jobs import ClaimedJob
from supervisor.engine.policy import resolve_heartbeat_timeout
from supervisor.pool import ChildEvent, JobDone, JobFailed, Pool, PoolSettings

FAST = dict(heartbeat_interval=0.05, heartbeat_timeout=1.0, kill_grace=1.0,
            boot_timeout=10.0)


class Driver:
    """A pool and the loop that drives it."""

    def __init__(self, **settings) -> None:
        merged = {"size": 1, **FAST, **settings}
        self.sel = selectors.DefaultSelector()
        self.pool = Pool(PoolSettings(**merged), self.sel)
        self.outcomes: list = []
        self._next_id = 0

    def turn(self, wait: float = 0.02) -> None:
        deadline = self.pool.next_deadline()
        timeout = wait if deadline is None else min(wait, max(0.0, deadline - time.monotonic()))
        for key, mask in self.sel.select(timeout):
            if key.data is self.pool:
                self.pool.handle_event(key, mask)
        self.pool.reap()
        self.pool.tick()
        self.outcomes += self.pool.take_outcomes()

    def until(self, predicate, timeout: float = 15.0) -> None:
        end = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < end, f"timed out; outcomes: {self.outcomes[-8:]}"
            self.turn()

    def start(self) -> Driver:
        self.pool.start()
        self.until(lambda: self.pool.idle_count() == self.pool.size())
        return self

    def job(self, kind: str, args: str = "{}", timeout: float | None = None) -> ClaimedJob:
        self._next_id += 1
        job = ClaimedJob(self._next_id, kind, "default", 1, 5, 0, timeout, args)
        job.heartbeat_timeout = resolve_heartbeat_timeout(job)  # as the claim does
        return job

    def finished(self, job_id: int):
        for o in self.outcomes:
            if isinstance(o, JobDone | JobFailed) and o.job.id == job_id:
                return o
        return None

    def run(self, kind: str, args: str = "{}", timeout: float | None = None):
        """Dispatch one job when a child is idle and wait for its outcome."""
        self.until(lambda: self.pool.idle_count() > 0)
        job = self.job(kind, args, timeout)
        assert self.pool.dispatch(job)
        self.until(lambda: self.finished(job.id) is not None)
        return self.finished(job.id)

    def events(self, what: str) -> list[ChildEvent]:
        return [o for o in self.outcomes if isinstance(o, ChildEvent) and o.what == what]

    def close(self) -> None:
        self.pool.stop()
        try:
            self.until(lambda: self.pool.alive() == 0, timeout=5.0)
        finally:
            self.pool.kill_all()
            self.until(lambda: self.pool.alive() == 0, timeout=5.0)
            self.sel.close()


def drivers_made():
    """The body of a test module's ``make_driver`` fixture: started drivers, each
    closed (children stopped, then killed) after the test. A module declares it with
    ``_make_driver = pytest.fixture(name="make_driver")(drivers_made)``."""
    drivers: list[Driver] = []

    def make(**settings) -> Driver:
        driver = Driver(**settings)
        drivers.append(driver)
        return driver.start()

    yield make
    for driver in drivers:
        driver.close()


def gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (a zombie nobody reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pids, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < end, f"still running: {[p for p in pids if not gone(p)]}"
        time.sleep(0.01)


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode().strip()
