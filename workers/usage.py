"""Measuring what each job costs, in the child that runs it (``shared.usage.Usage``).

CPU time is the CPU of the child's whole process tree: ``getrusage`` of the child itself
plus what its reaped children used (a handler's ``subprocess.run`` counts), plus, when
the child has descendants, what ``/proc/<pid>/stat`` says every live one (zombies
included) and the children each of them reaped have used (``shared.procfs.tree_ticks``).
A job's CPU is the difference of that total between the job's start and its end, so the
work of a process pool that outlives the job (loky's workers, a helper the runtime
kills after the job, a pool kept across jobs) counts for the job it was done in. One
``waitid`` (``WNOWAIT``: it reaps nothing) at the job's end tells whether there are
descendants at all: a subreaper without children has none, and then no ``/proc`` read
is made; at the start it is asked only if the last look saw some (the runtime kills a
job's leftovers, so normally none is left). With none at the start, a job's CPU counts
from the previous job's end, so it includes the
runtime's few microseconds between two jobs (reading the next RUN, writing the answer)
and saves system calls (``rebase`` after the runtime reaps a job's leftovers: their
CPU after the job's end is nobody's).

What the total cannot see: processes that left the tree (started through a daemon, or
a subreaper that is not ours), processes auto-reaped because their parent ignores
``SIGCHLD`` (the kernel adds their CPU to no one), more than 1000 descendants, and
``/proc``'s clock-tick truncation (under 20 ms per live process at each end). A
descendant's CPU is read from its own stat while it lives and from its parent's
``cutime`` once reaped; a read that raced a reap is taken again (see ``tree_ticks``).

Peak memory is the kernel's high-water mark of the child's resident set, reset as each
job starts by writing ``5`` to ``/proc/self/clear_refs`` and read at its end from
``getrusage``'s ``ru_maxrss``. That is the larger of the mark (``VmHWM``) and a mark the
process kept, which no reset lowers: the image an ``exec`` replaced, and on some kernels
a thread that exited; after one such high mark, ``ru_maxrss`` would read high for every
job after it. So right after each reset the meter compares ``ru_maxrss`` with the
resident set (``/proc/self/statm``): when it is no higher, the kept mark is
below anything this job can reach and ``ru_maxrss`` at the end is the job's peak; when
it is higher, the job's end reads ``VmHWM`` from ``/proc/self/status`` instead, unless
``ru_maxrss`` rose during the job (then it is this job's mark). Reading ``status`` at
every job's end cost a 20 ms job 0.08-0.1 ms of the child's CPU on a 2-vCPU VM (its text
is long, and read cold after the handler); ``statm`` is a few numbers, read while the
job's start has the caches warm. Jobs shorter than ``STATUS_AFTER`` whose mark is steady
skip the reset, so a no-op job pays no ``/proc`` call at all. Where
``/proc`` cannot be written or read, one warning says so and ``ru_maxrss`` (the peak
since the child started, if the mark cannot be reset) stands in. A process the job ran
and reaped (a ``subprocess.run`` of an ffmpeg, issue 45) counts too: when the largest
peak of the child's reaped descendants (``RUSAGE_CHILDREN``'s ``ru_maxrss``) rose during
the job, the job's peak is at least that. Descendants still alive at the end are not
read here: the parent samples the whole tree's RSS while the job runs when it watches
memory (``supervisor.pool.killedusage.KilledUsage.tree_peak``).
"""

from __future__ import annotations

import fcntl
import os
import resource
import time
from collections.abc import Callable
from typing import NamedTuple

from shared.procfs import descendants_cpu, has_children
from shared.usage import Usage

HIGH_FD = 900  # the meter's /proc files live at or above this fd number
STATUS_AFTER = 0.005  # after a job this long the next one resets the mark
_SELF = resource.RUSAGE_SELF
_CHILDREN = resource.RUSAGE_CHILDREN
_getrusage = resource.getrusage
_monotonic = time.monotonic
_getpid = os.getpid
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


_TRIES = 4


class _TreeReading(NamedTuple):
    """What ``_cpu_now`` read of the child's process tree."""

    cpu_seconds: float  # this process, the children it reaped, its live descendants
    has_descendants: bool
    reaped_peak_kib: int  # the largest peak of any child reaped so far


def _cpu_now(mine: resource.struct_rusage | None = None) -> _TreeReading:
    """The tree's CPU seconds now (``mine``: this process's rusage, if just read)."""
    if mine is None:
        mine = _getrusage(_SELF)
    theirs = _getrusage(_CHILDREN)
    tree = 0.0
    kids = has_children()
    if kids:
        # A handler's thread may reap a descendant between the two readings: then its
        # CPU would be in both (or in neither); read again until the reaped sum held.
        for _ in range(_TRIES):
            tree = descendants_cpu(_getpid())
            again = _getrusage(_CHILDREN)
            if again == theirs:
                break
            theirs = again
    return _TreeReading(mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime
                        + tree, kids, theirs.ru_maxrss)


class UsageMeter:
    """Measures one job at a time: ``start()`` as it begins, ``stop()`` as it ends."""

    __slots__ = ("_clear_fd", "_cpu", "_kids", "_mark", "_reaped_peak", "_reset_due",
                 "_start_mark", "_statm_fd", "_status_fd", "_t0", "_warn", "usage")

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._clear_fd = self._open("/proc/self/clear_refs", os.O_WRONLY)
        self._status_fd = self._open("/proc/self/status", os.O_RDONLY) \
            if self._clear_fd is not None else None
        self._statm_fd = self._open("/proc/self/statm", os.O_RDONLY) \
            if self._status_fd is not None else None
        self._reset_due = True
        # ru_maxrss right after this job's reset, when an exited thread's mark was above
        # the resident set then (the end must read VmHWM); None: ru_maxrss is exact.
        self._start_mark: int | None = None
        tree = _cpu_now()  # the first job's CPU counts from here
        self._cpu, self._kids = tree.cpu_seconds, tree.has_descendants
        self._reaped_peak = tree.reaped_peak_kib
        self._mark = 0
        self._t0 = 0.0
        self.usage: Usage | None = None  # the last job's, once ``stop`` measured it

    def _open(self, path: str, flags: int) -> int | None:
        try:
            low = os.open(path, flags | os.O_CLOEXEC)
        except OSError as exc:
            self._proc_failed(f"cannot open {path} ({exc.strerror})")
            return None
        # Kept far above the low numbers a handler may close wholesale (closerange(0,
        # 11)), whose reuse by another file would have the meter write into that file.
        try:
            high = fcntl.fcntl(low, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
        except OSError:
            return low  # a low fd limit: the low one still works
        os.close(low)
        return high

    def _drop(self, fd: int) -> None:
        # A handler may have closed it already.
        try:
            os.close(fd)
        except OSError:
            pass

    def _proc_failed(self, why: str) -> None:
        if self._warn is not None:
            self._warn(f"job usage: {why}; max_rss_bytes falls back to getrusage's "
                       "peak, which is not reset per job")
            self._warn = None  # type: ignore[assignment]  # once per child

    def start(self) -> None:
        """A job begins: reset the memory mark (unless it stayed where the last reset
        left it) and take the wall clock. CPU time counts from the last job's end, or
        from now if the child has descendants (a pool kept from an earlier job: what it
        did between jobs is not this job's)."""
        if (self._reset_due or self._start_mark is not None) and self._clear_fd is not None:
            try:
                os.write(self._clear_fd, b"5")
            except OSError as exc:
                self._drop(self._clear_fd)
                self._clear_fd = None
                self._proc_failed(f"cannot reset the memory mark ({exc.strerror})")
            else:
                self._start_mark = self._exited_threads_mark()
        # Descendants are looked for only if the last look saw some: the runtime kills
        # a job's leftovers (``rebase``), and nothing else forks between jobs.
        if self._kids and has_children():
            tree = _cpu_now()
            self._cpu, self._kids = tree.cpu_seconds, tree.has_descendants
        self._t0 = _monotonic()

    def stop(self) -> Usage:
        """The job ended: what it cost since ``start`` (its CPU since the last end)."""
        wall = _monotonic() - self._t0
        mine = _getrusage(_SELF)
        tree = _cpu_now(mine)
        self._kids = tree.has_descendants
        cpu = tree.cpu_seconds - self._cpu
        self._cpu = tree.cpu_seconds
        peak = mine.ru_maxrss * 1024
        # The mark moved during this job (or was reset at its start) unless it reads as
        # at the last job's end: then the next job resets it; once steady, no resets.
        self._reset_due = wall >= STATUS_AFTER or mine.ru_maxrss != self._mark
        self._mark = mine.ru_maxrss
        if self._start_mark is not None and mine.ru_maxrss <= self._start_mark \
                and self._status_fd is not None:
            hwm = self._read_hwm()
            if hwm is not None:
                peak = hwm
        reaped = tree.reaped_peak_kib
        if reaped > self._reaped_peak:  # a process it ran and reaped peaked at that
            self._reaped_peak = reaped
            peak = max(peak, reaped * 1024)
        usage = self.usage = Usage(max(cpu, 0.0), wall, peak)
        return usage

    @property
    def saw_descendants(self) -> bool:
        """Whether the last reading (``stop``'s, after a job) found any process under
        this one."""
        return self._kids

    def rebase(self) -> None:
        """Count the next job's CPU from now: what the runtime did since the last end
        (reaping processes the job left behind, their CPU time and their peak memory) is
        nobody's."""
        tree = _cpu_now()
        self._cpu, self._kids = tree.cpu_seconds, tree.has_descendants
        self._reaped_peak = tree.reaped_peak_kib

    def _exited_threads_mark(self) -> int | None:
        """Just after a reset: ``ru_maxrss`` (KiB) if it stands above the resident set,
        which only a kept mark (an exec's, an exited thread's) can do, else None.
        Unknown (no ``statm``): assumed above, so the end reads VmHWM."""
        mark = _getrusage(_SELF).ru_maxrss
        fd = self._statm_fd
        if fd is None:
            return mark
        try:
            resident_kib = int(os.pread(fd, 256, 0).split()[1]) * _PAGE_KIB
        except (OSError, ValueError, IndexError):
            self._drop(fd)
            self._statm_fd = None
            return mark
        # The job's VmHWM will be at least the resident set read after its reset, so a
        # mark no higher than that leaves ru_maxrss at the end equal to VmHWM.
        return mark if mark > resident_kib else None

    def _read_hwm(self) -> int | None:
        fd = self._status_fd
        assert fd is not None
        try:
            data = os.pread(fd, 8192, 0)
            at = data.index(b"VmHWM:")
            return int(data[at + 6:data.index(b"kB", at)]) * 1024
        except (OSError, ValueError) as exc:
            self._drop(fd)
            self._status_fd = None
            self._proc_failed(f"cannot read VmHWM from /proc/self/status ({exc})")
            return None
