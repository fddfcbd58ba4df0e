"""The book of reservations: what the jobs started here hold, and which waiting job
fits next.

A job's need is its ``cpus`` (None: 1) and ``memory`` (None: its kind's measured size
when this supervisor has a memory budget: the p95 of recent ``max_rss_bytes`` once the
kind has 20 samples, the largest before, killed attempts included, else nothing). A job
that needs one CPU and no memory needs nothing of the book: it starts as it always did.
A job that needs more starts only on an idle child, only while the needs charged here
plus its own fit the budget and, in a container, while the container's usage plus its
own stays under the limit less its headroom (issue 51: the cgroup is the ground truth:
what nobody declared shows there); its charge lasts until the job ends or comes back
unstarted. A ``cpus=4`` job keeps three more children idle meanwhile.

Caution (issue 51): under a memory budget (the flag, or a container's limit), a job
whose kind has no measured size yet is "unmeasured": it reserves its child's share of
the budget (the budget over ``-n``, times its ``cpus``) and one such job runs here at a
time, so a new kind's first job teaches its size before a second one starts beside it,
and a big measured job does not start beside it either. A job that failed for memory
here is retried alone (it needs the whole memory budget). Once every kind claimed here
is measured and ``-n`` jobs of the largest fit the budget, memory cannot refuse a start
and the book disengages (``engaged``): the plain dispatch, with its prefetch, runs.

Patience: a job that does not fit may be overtaken by later jobs of its queue that do;
once it has waited ``patience`` seconds, nothing behind it in its queue starts until it
does, so a stream of small jobs cannot starve it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.jobs import ClaimedJob
from shared.units import format_size
from supervisor.admission.budget import Budget

# Waiting jobs of a queue looked at for one that fits: a bound on the work per start.
SCAN = 64


# Container usage is read at most this often while jobs wait to start (seconds).
USAGE_EVERY = 0.05
# Peaks kept per kind between two writes: as many as the database keeps (0033).
SAMPLES_KEPT = 200
# Jobs remembered as failed for memory here, to retry alone: a bound on the memory.
ALONE_KEPT = 1024
# How a job's memory is measured (issue 45), in words for status and the start-up line.
MEASURE = "its process tree's RSS, summed and sampled by the parent"


@dataclass(frozen=True, slots=True)
class Need:
    """What one job reserves: ``cpus`` children's worth, ``memory`` bytes (0: none),
    counted ``resources`` by name (``{"gpu": 1}``; empty: none). ``measured``: False
    for a job whose kind's size is not known yet (caution)."""

    cpus: int
    memory: int
    resources: Mapping[str, int] = field(default_factory=dict)
    measured: bool = True

    def describe(self) -> str:
        """The need in words (``4 CPUs, 600 MiB, gpu=1``)."""
        parts = []
        if self.cpus > 1:
            parts.append(f"{self.cpus} CPUs")
        if self.memory:
            parts.append(format_size(self.memory))
        parts.extend(f"{name}={n}" for name, n in sorted(self.resources.items()))
        if not self.measured:
            parts.append("memory not measured yet")
        return ", ".join(parts) or "1 CPU"


class Admission:
    """Reservations charged by the jobs started here, against ``budget``."""

    def __init__(self, budget: Budget, patience: float) -> None:
        self.budget = budget
        self.patience = patience
        # The kinds claimed here without a declared memory, under a memory budget: while
        # each has a measured size and ``-n`` of the largest fit, memory cannot bind.
        self.seen_kinds: set[str] = set()
        self._memory_binds: bool | None = None  # cached; None: to work out again
        self.charged: dict[int, Need] = {}  # job id -> its charge, from dispatch to end
        self.extra_cpus = 0  # children kept idle for multi-CPU jobs: sum of cpus - 1
        self.memory_held = 0
        # Each kind's default memory (its measured size): read every minute while there
        # is a memory budget, and raised at once by what each attempt here used.
        self.kind_memory: dict[str, int] = {}
        self.unmeasured_running = 0  # jobs started here before their kind had a size
        # Each kind's attempts' peaks since the last write, oldest first (0026, 0033).
        self.unsaved: dict[str, deque[int]] = {}
        self.alone: dict[int, None] = {}  # jobs that failed for memory here: retried alone
        self.usage: int | None = None  # the container's usage, as last read
        self._usage_read = float("-inf")
        self.declared = False  # a claimed job declared a reservation
        self.bounded = False  # a job beyond the whole budget was seen: claims skip such
        self._blocked_since: dict[int, float] = {}  # waiting job id -> first did not fit
        self.waiting_why: dict[int, str] = {}  # held back now, and why (for status)
        self.too_big: dict[int, str] = {}  # left for other supervisors, and why
        # Counted resources: the indices of each that no started job holds (a job gets
        # the lowest free ones: its devices), and what each charged job holds.
        self.free_devices: dict[str, list[int]] = {
            name: list(range(n)) for name, n in budget.resources.items()}
        self.devices: dict[int, dict[str, list[int]]] = {}

    @property
    def engaged(self) -> bool:
        """Whether starts must go through the book. False while nothing is declared and
        no memory budget can bind: then the engine's plain dispatch runs, at no cost
        (children's pipes prefetch as usual)."""
        if self.declared or self.charged:
            return True
        if self._memory_binds is None:
            self._memory_binds = self._memory_may_bind()
        return self._memory_binds

    def _memory_may_bind(self) -> bool:
        """Whether the memory budget can refuse a start. It cannot once every served
        kind has a measured size and ``-n`` jobs of the largest fit the budget
        together: then any mix the children run fits, and the book would only cost the
        pipes their prefetch (every start on an idle child, one claim round trip each).
        It can while some kind is unmeasured (its first job runs with caution), one is
        too big for that, or a job failed for memory here (retried alone). The kinds
        are those claimed here (``claimed`` notes them before any is dispatched), not
        every kind the app registers: most never reach a given supervisor. Outside the
        book the container's guard (``supervisor.pool.pressure``) still watches the
        cgroup's usage, which catches what the measured sizes missed."""
        memory = self.budget.memory
        if memory is None:
            return False
        if self.alone:
            return True
        sizes = self.kind_memory
        if any(kind not in sizes for kind in self.seen_kinds):
            return True
        largest = max((sizes[kind] for kind in self.seen_kinds), default=0)
        return largest * self.budget.cpus > memory

    def need(self, job: ClaimedJob) -> Need | None:
        """``job``'s need, or None when it needs nothing of the book."""
        memory = job.memory
        cpus = job.cpus or 1
        resources = job.resources or {}
        budget = self.budget
        if memory is None and budget.memory is not None:
            if job.id in self.alone:
                return Need(cpus, budget.memory, resources)
            memory = self.kind_memory.get(job.kind)
            if memory is None:
                return Need(cpus, budget.memory * cpus // budget.cpus, resources,
                            measured=False)
            # A kind measured past the whole budget runs alone rather than never.
            memory = min(memory, budget.memory)
        if cpus == 1 and not memory and not resources:
            return None
        return Need(cpus, memory or 0, resources)

    # -- what jobs used -----------------------------------------------------------------
    def measured(self, sizes: dict[str, int]) -> None:
        """Each kind's size as the database says (``Store.kind_memory_p95``); kinds it
        does not know yet keep what was learned here."""
        self.kind_memory = {**self.kind_memory, **sizes}
        self._memory_binds = None

    def take_unsaved(self) -> dict[str, list[int]]:
        """Each kind's attempts' peaks here since the last call, oldest first: what the
        engine keeps in the database for every supervisor's reading of the kind's size
        and for supervisors that start later."""
        unsaved, self.unsaved = self.unsaved, {}
        return {kind: list(peaks) for kind, peaks in unsaved.items()}

    def not_saved(self, samples: Mapping[str, Sequence[int]]) -> None:
        """``take_unsaved``'s answer could not be written: kept, before what came since,
        for the next write."""
        for kind, peaks in samples.items():
            since = self.unsaved.get(kind, ())
            self.unsaved[kind] = deque([*peaks, *since], maxlen=SAMPLES_KEPT)

    def learned(self, job: ClaimedJob, rss: int, memory_failure: bool = False) -> None:
        """An attempt of ``job`` here used ``rss`` bytes at its peak (for a killed one,
        the last sample): its kind's size is at least that from now on, and the sample
        is kept for the database. With ``memory_failure`` the job itself is retried
        alone."""
        if self.budget.memory is None:
            return
        if rss > 0:
            samples = self.unsaved.get(job.kind)
            if samples is None:
                samples = self.unsaved[job.kind] = deque(maxlen=SAMPLES_KEPT)
            samples.append(rss)
        if rss > self.kind_memory.get(job.kind, 0):
            self.kind_memory[job.kind] = rss
            self._memory_binds = None
        if memory_failure and job.memory is None:
            self.alone[job.id] = None
            self._memory_binds = None
            if len(self.alone) > ALONE_KEPT:
                del self.alone[next(iter(self.alone))]

    # -- claimed jobs -----------------------------------------------------------------
    def claimed(self, jobs: Iterable[ClaimedJob]) -> list[ClaimedJob]:
        """Note what claimed ``jobs`` declare; returns those that can never fit this
        supervisor's whole budget (they go back, uncharged, for other supervisors)."""
        beyond = []
        watch_kinds = self.budget.memory is not None
        for job in jobs:
            if watch_kinds and job.memory is None and job.kind not in self.seen_kinds:
                self.seen_kinds.add(job.kind)
                self._memory_binds = None
            if job.cpus is None and job.memory is None and not job.resources:
                continue
            self.declared = True
            need = self.need(job)
            why = self.beyond_budget(need) if need is not None else None
            if why is not None:
                beyond.append(job)
                self.too_big[job.id] = why
                self.bounded = True
        if len(self.too_big) > SCAN:
            for job_id in list(self.too_big)[:-SCAN]:
                del self.too_big[job_id]
        return beyond

    def beyond_budget(self, need: Need) -> str | None:
        """Why ``need`` can never fit this supervisor, or None."""
        budget = self.budget
        if need.cpus > budget.cpus:
            return f"needs {need.cpus} CPUs, budget {budget.cpus}"
        if budget.memory is not None and need.memory > budget.memory:
            return f"needs {format_size(need.memory)}, budget {format_size(budget.memory)}"
        for name, n in sorted(need.resources.items()):
            have = budget.resources.get(name, 0)
            if n > have:
                return (f"needs {name}={n}, this supervisor has "
                        + (f"{name}={have}" if have else f"no {name} (--resources)"))
        return None

    def bounds(self) -> tuple[int, int | None, Mapping[str, int]] | None:
        """(most CPUs, most memory, most of each counted resource) a claim may take per
        job, once a job beyond the budget was seen; None before (the claim stays the
        measured statement)."""
        if not self.bounded:
            return None
        return (self.budget.cpus, self.budget.memory, self.budget.resources)

    # -- starting ---------------------------------------------------------------------
    def choose(self, waiting: Sequence[ClaimedJob], free: int, now: float) -> int | None:
        """The index in ``waiting`` (one queue's, in start order) of the job to give an
        idle child now, with ``free`` children free of other jobs' CPU charges; None
        when none may start (none fits, or one that waited past patience is first)."""
        if free <= 0:
            return None
        container = self.budget.container
        if container is not None and now - self._usage_read >= USAGE_EVERY:
            self._usage_read = now
            self.usage = container.usage()
        for index, job in enumerate(waiting):
            if index >= SCAN:
                return None
            need = self.need(job)
            why = self._short(need, free) if need is not None else None
            if why is None:
                self._blocked_since.pop(job.id, None)
                self.waiting_why.pop(job.id, None)
                return index
            since = self._blocked_since.setdefault(job.id, now)
            self.waiting_why[job.id] = why
            if now - since >= self.patience:
                return None  # it waited long enough: nothing behind it overtakes it
        return None

    def _short(self, need: Need, free: int) -> str | None:
        """Why ``need`` does not fit now, or None."""
        if need.cpus > free:
            return f"needs {need.cpus} CPUs, {max(free, 0)} free of {self.budget.cpus}"
        memory = self.budget.memory
        if need.memory and memory is not None and self.memory_held + need.memory > memory:
            return (f"needs {format_size(need.memory)}, {format_size(self.memory_held)} of "
                    f"{format_size(memory)} held")
        for name, n in sorted(need.resources.items()):
            free_now = len(self.free_devices.get(name, ()))
            if n > free_now:
                return (f"needs {name}={n}, {free_now} free of "
                        f"{self.budget.resources.get(name, 0)}")
        if not need.measured and self.unmeasured_running:
            return ("its kind's memory is not measured yet: one such job at a time under "
                    "a memory budget")
        # Only beside other jobs: alone, a job starts whatever the baseline (else one
        # that fits the budget but not the baseline would wait forever).
        ceiling, usage = self.budget.ceiling, self.usage
        if need.memory and self.charged and ceiling is not None and usage is not None and (
                usage + need.memory > ceiling):
            return (f"needs {format_size(need.memory)}, the container uses "
                    f"{format_size(usage)} of {format_size(ceiling)} it may")
        return None

    def charge(self, job: ClaimedJob) -> None:
        """``job`` went to a child: its need counts until it ends."""
        need = self.need(job)
        if need is None:
            return
        self.charged[job.id] = need
        self.extra_cpus += need.cpus - 1
        self.memory_held += need.memory
        if need.resources:
            held = {}
            for name, n in need.resources.items():
                free = self.free_devices[name]
                held[name], free[:] = free[:n], free[n:]
            self.devices[job.id] = held
            job.devices = held
        if not need.measured:
            self.unmeasured_running += 1

    def release(self, job_id: int) -> None:
        """``job_id`` ended or came back unstarted: its charge is freed."""
        need = self.charged.pop(job_id, None)
        if need is not None:
            self.extra_cpus -= need.cpus - 1
            self.memory_held -= need.memory
            if not need.measured:
                self.unmeasured_running -= 1
        for name, indices in self.devices.pop(job_id, {}).items():
            self.free_devices[name] = sorted(self.free_devices[name] + indices)

    def prune(self, waiting: set[int]) -> None:
        """Forget held-back jobs that no longer wait here (released, lost, cancelled)."""
        for job_id in [i for i in self.waiting_why if i not in waiting]:
            self._blocked_since.pop(job_id, None)
            del self.waiting_why[job_id]

    def memory_summary(self) -> str:
        """The memory budget and what it means, for the start-up log line."""
        budget = self.budget
        if budget.memory is None:
            return f"no memory admission ({budget.source})"
        words = (f"budget {format_size(budget.memory)} ({budget.source}); each job "
                 f"measured by {MEASURE}; a kind not measured yet runs one job at a time")
        if budget.ceiling is not None:
            words += (f"; nothing starts beside other jobs past "
                      f"{format_size(budget.ceiling)} of the container's memory in use")
        return words

    def report(self) -> dict:
        """What ``status`` shows of this supervisor's admission (its heartbeat's info)."""
        budget = self.budget
        container = budget.container
        return {"cpus": budget.cpus, "memory": budget.memory,
                "source": budget.source,
                "resources": {name: {"total": total,
                                     "held": total - len(self.free_devices[name])}
                              for name, total in sorted(budget.resources.items())},
                "held": self.memory_held,
                "container": None if container is None else {
                    "limit": container.limit, "usage": container.usage(),
                    "source": container.source},
                "unmeasured_running": self.unmeasured_running,
                "measure": MEASURE,
                "waiting": len(self.waiting_why),
                "why": sorted(set(self.waiting_why.values()))[:5],
                "too_big": sorted(set(self.too_big.values()))[:5]}
