"""Fakes for the pool's policy tests, honcho-style: an OS that forks nothing, a clock
that moves when told, a selector that only remembers, and a harness that plays the
children's side of the pipes."""

from __future__ import annotations

import random
import selectors

from shared import wire
from shared.procfs import GroupSample
from supervisor.pool import Pool, PoolSettings
from supervisor.pool.oscalls import Reaped


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeOs:
    def __init__(self) -> None:
        self.next_fd = 10
        self.next_pid = 500
        self.inbox: dict[int, bytearray] = {}  # parent read fd -> bytes a child wrote
        self.eof: set[int] = set()
        self.written: dict[int, bytearray] = {}  # parent write fd -> bytes sent
        self.write_budget: int | None = None  # None: pipes take everything
        self.signals: list[tuple[int, int]] = []  # (pgid, sig)
        self.exits: list[tuple[int, int]] = []  # what wait4 will report
        self.cpu_at_exit: dict[int, float] = {}  # pid -> wait4's CPU seconds; none: unknown
        self.closed: set[int] = set()
        self.rss_of: dict[int, int] = {}  # pid -> bytes resident now
        self.peak_of: dict[int, int] = {}  # pid -> peak bytes (VmHWM)
        self.escaped_of: dict[int, list[int]] = {}  # pid -> descendants out of its group
        self.sample_of: dict[int, GroupSample] = {}  # pid -> CPU and state; none: unreadable

    def fork(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def pipe(self) -> tuple[int, int]:
        r, w = self.next_fd, self.next_fd + 1
        self.next_fd += 2
        return r, w

    def set_blocking(self, fd: int, blocking: bool) -> None:
        pass

    def close(self, fd: int) -> None:
        self.closed.add(fd)

    def read(self, fd: int, size: int) -> bytes:
        buf = self.inbox.get(fd)
        if buf:
            data = bytes(buf[:size])
            del buf[:size]
            return data
        if fd in self.eof:
            return b""
        raise BlockingIOError

    def write(self, fd: int, data: bytes) -> int:
        n = len(data) if self.write_budget is None else min(len(data), self.write_budget)
        if n == 0:
            raise BlockingIOError
        if self.write_budget is not None:
            self.write_budget -= n
        self.written.setdefault(fd, bytearray()).extend(data[:n])
        return n

    def kill(self, pid: int, sig: int) -> bool:
        self.signals.append((pid, sig))
        return True

    def killpg(self, pgid: int, sig: int) -> bool:
        self.signals.append((pgid, sig))
        return True

    def setpgid(self, pid: int, pgid: int) -> None:
        pass

    def rss(self, pid: int) -> int | None:
        return self.rss_of.get(pid, 50 << 20)

    def peak_rss(self, pid: int) -> int | None:
        return self.peak_of.get(pid, self.rss(pid))

    def escaped(self, pid: int) -> list[int]:
        return self.escaped_of.get(pid, [])

    def group_sample(self, pid: int) -> GroupSample | None:
        return self.sample_of.get(pid)

    def wait_any(self) -> Reaped:
        if not self.exits:
            return Reaped(0, 0)
        pid, status = self.exits.pop(0)
        return Reaped(pid, status, self.cpu_at_exit.get(pid))

    def clear_shm(self, pid: int) -> int:
        return 0

    def getpid(self) -> int:
        return 1

    memory_limit_now: int | None = None  # the container's limit; None: no container
    memory_usage_now: int | None = None
    oom_kills_now: int | None = None

    def memory_limit(self) -> int | None:
        return self.memory_limit_now

    def memory_usage(self) -> int | None:
        return self.memory_usage_now

    def oom_kills(self) -> int | None:
        return self.oom_kills_now


class FakeSelector(selectors.BaseSelector):
    def __init__(self) -> None:
        self.keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj, events, data=None):
        key = selectors.SelectorKey(fileobj, fileobj, events, data)
        assert fileobj not in self.keys, f"fd {fileobj} registered twice"
        self.keys[fileobj] = key
        return key

    def unregister(self, fileobj):
        return self.keys.pop(fileobj)

    def select(self, timeout=None):
        return []

    def get_map(self):
        return self.keys


def exited(code: int) -> int:
    return code << 8


def signalled(sig: int) -> int:
    return int(sig)


class Harness:
    """A pool over fakes. Its children behave like real ones about START: a child
    that gets a job while idle, or answers with more queued, starts the next at once
    (``auto_start=False`` leaves every START to the test)."""

    def __init__(self, auto_start: bool = True, **overrides) -> None:
        defaults = dict(size=2, boot_timeout=10.0, heartbeat_interval=1.0,
                        heartbeat_timeout=5.0, kill_grace=3.0)
        defaults.update(overrides)
        self.settings = PoolSettings(**defaults)
        self.os = FakeOs()
        self.clock = FakeClock()
        self.sel = FakeSelector()
        self.pool = Pool(self.settings, self.sel, oscalls=self.os, clock=self.clock,
                         rng=random.Random(7))
        self.outcomes: list = []
        self.auto_start = auto_start
        dispatch = self.pool.dispatch

        def dispatch_and_start(job, depth: int = 1, **options) -> bool:
            taken = dispatch(job, depth, **options)
            self.start_heads()
            return taken

        self.pool.dispatch = dispatch_and_start

    def start_heads(self) -> None:
        """Every busy child whose head job has not started says START for it."""
        if not self.auto_start:
            return
        for pid, child in list(self.pool._children.items()):
            if child.jobs and not child.started and child.state == "busy":
                self.says(pid, wire.Start(child.jobs[0].id).encode())

    # playing a child
    def child(self, pid: int):
        return self.pool._children[pid]

    def pids(self) -> list[int]:
        return sorted(self.pool._children)

    def says(self, pid: int, frame: bytes, deliver: bool = True) -> None:
        child = self.child(pid)
        self.os.inbox.setdefault(child.read_fd, bytearray()).extend(frame)
        if deliver:
            self.pool.handle_event(self.sel.keys[child.read_fd], selectors.EVENT_READ)
            self.start_heads()

    def ready(self, *pids: int) -> None:
        for pid in pids or self.pids():
            self.says(pid, wire.Ready(pid, 0).encode())

    def exits(self, pid: int, status: int) -> None:
        self.os.exits.append((pid, status))
        self.pool.reap()

    def sent(self, pid: int) -> list[wire.Frame]:
        return wire.FrameReader().feed(bytes(self.os.written.get(self.child(pid).write_fd,
                                                                 b"")))

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.pool.tick()

    def take(self, kind=None) -> list:
        got = self.pool.take_outcomes()
        self.outcomes += got
        return [o for o in got if kind is None or isinstance(o, kind)]

    def signals_to(self, pid: int) -> list[int]:
        return [sig for pgid, sig in self.os.signals if pgid == pid]


def started(**overrides) -> Harness:
    """A ``Harness`` whose pool is started, its children READY and the READYs read."""
    h = Harness(**overrides)
    h.pool.start()
    h.ready()
    h.take()
    return h
