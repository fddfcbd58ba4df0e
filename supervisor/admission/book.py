"""The book of reservations: what the jobs started here hold, and which waiting job
fits next.

A job's need is its ``cpus`` (None: 1) and ``memory`` (None: its kind's p95 of recent
``max_rss_bytes`` when this supervisor has a memory budget and the kind has 20 samples,
else nothing). A job that needs one CPU and no memory needs nothing of the book: it
starts as it always did. A job that needs more starts only on an idle child, only while
the needs charged here plus its own fit the budget; its charge lasts until the job ends
or comes back unstarted. A ``cpus=4`` job keeps three more children idle meanwhile.

Patience: a job that does not fit may be overtaken by later jobs of its queue that do;
once it has waited ``patience`` seconds, nothing behind it in its queue starts until it
does, so a stream of small jobs cannot starve it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.jobs import ClaimedJob
from shared.units import format_size
from supervisor.admission.budget import Budget

# Waiting jobs of a queue looked at for one that fits: a bound on the work per start.
SCAN = 64


@dataclass(frozen=True, slots=True)
class Need:
    """What one job reserves: ``cpus`` children's worth, ``memory`` bytes (0: none), and
    counted ``resources`` by name (``{"gpu": 1}``; empty: none)."""

    cpus: int
    memory: int
    resources: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """The need in words (``4 CPUs, 600 MiB, gpu=1``)."""
        parts = []
        if self.cpus > 1:
            parts.append(f"{self.cpus} CPUs")
        if self.memory:
            parts.append(format_size(self.memory))
        parts.extend(f"{name}={n}" for name, n in sorted(self.resources.items()))
        return ", ".join(parts) or "1 CPU"


class Admission:
    """Reservations charged by the jobs started here, against ``budget``."""

    def __init__(self, budget: Budget, patience: float) -> None:
        self.budget = budget
        self.patience = patience
        self.charged: dict[int, Need] = {}  # job id -> its charge, from dispatch to end
        self.extra_cpus = 0  # children kept idle for multi-CPU jobs: sum of cpus - 1
        self.memory_held = 0
        # Each kind's default memory (p95 of recent max_rss_bytes), read every minute
        # while there is a memory budget.
        self.kind_memory: dict[str, int] = {}
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
        no default memory applies: then the engine's plain dispatch runs, at no cost."""
        return self.declared or bool(self.charged) or (
            self.budget.memory is not None and bool(self.kind_memory))

    def need(self, job: ClaimedJob) -> Need | None:
        """``job``'s need, or None when it needs nothing of the book."""
        memory = job.memory
        if memory is None and self.budget.memory is not None and self.kind_memory:
            memory = self.kind_memory.get(job.kind)
        cpus = job.cpus or 1
        resources = job.resources
        if cpus == 1 and not memory and not resources:
            return None
        return Need(cpus, memory or 0, resources or {})

    # -- claimed jobs -----------------------------------------------------------------
    def claimed(self, jobs: Iterable[ClaimedJob]) -> list[ClaimedJob]:
        """Note what claimed ``jobs`` declare; returns those that can never fit this
        supervisor's whole budget (they go back, uncharged, for other supervisors)."""
        beyond = []
        for job in jobs:
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

    def release(self, job_id: int) -> None:
        """``job_id`` ended or came back unstarted: its charge is freed."""
        need = self.charged.pop(job_id, None)
        if need is not None:
            self.extra_cpus -= need.cpus - 1
            self.memory_held -= need.memory
        for name, indices in self.devices.pop(job_id, {}).items():
            self.free_devices[name] = sorted(self.free_devices[name] + indices)

    def prune(self, waiting: set[int]) -> None:
        """Forget held-back jobs that no longer wait here (released, lost, cancelled)."""
        for job_id in [i for i in self.waiting_why if i not in waiting]:
            self._blocked_since.pop(job_id, None)
            del self.waiting_why[job_id]

    def report(self) -> dict:
        """What ``status`` shows of this supervisor's admission (its heartbeat's info)."""
        return {"cpus": self.budget.cpus, "memory": self.budget.memory,
                "source": self.budget.source,
                "resources": {name: {"total": total,
                                     "held": total - len(self.free_devices[name])}
                              for name, total in sorted(self.budget.resources.items())},
                "waiting": len(self.waiting_why),
                "why": sorted(set(self.waiting_why.values()))[:5],
                "too_big": sorted(set(self.too_big.values()))[:5]}
