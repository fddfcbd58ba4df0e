"""``current_job()``: what a running handler may know about its job, and progress.

The child runtime sets the context before calling a handler and clears it after. The
heartbeat thread reads the latest progress from here and carries it to the parent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from shared.dependencies import Dependency


@dataclass
class JobContext:
    """The running job as its handler sees it."""

    id: int
    kind: str
    queue: str
    attempt: int
    args: dict[str, Any]
    max_attempts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    _progress: dict[str, Any] | None = None
    _progress_seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _on_progress: Callable[[], None] | None = field(default=None, repr=False)
    # The last checkpoint of an earlier attempt (or of this one, before a drain or a
    # rescue), decoded; None on a first run.
    resume: Any = None
    # Set from the child's heartbeat thread when the parent's stop notice arrives.
    stop_reason: str | None = None
    # The indices of each counted resource the job holds (``{"gpu": [1]}``); None: none.
    devices: dict[str, list[int]] | None = None
    # Where checkpoints go: (state as JSON bytes, flush) -> None. None: kept here only
    # (``supervisor.testing`` runs jobs without a parent).
    _send_checkpoint: Callable[[bytes, bool], None] | None = field(default=None, repr=False)
    _checkpoint_cap: int = 1 << 20
    last_checkpoint: Any = field(default=None, repr=False)  # as stored by checkpoint()
    _dependencies: list[Dependency] | None = field(default=None, repr=False)

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress (``done`` of ``total``, with an optional message). It reaches
        the parent with the next heartbeat and is stored on the job row."""
        report: dict[str, Any] = {"done": done}
        if total is not None:
            report["total"] = total
        if message is not None:
            report["message"] = str(message)
        try:
            orjson.dumps(report)  # here, in the handler, not later in the heartbeat thread
        except TypeError as exc:
            raise TypeError(f"progress() takes JSON numbers: {exc}") from None
        with self._lock:
            self._progress = report
            self._progress_seq += 1
        if self._on_progress is not None:
            self._on_progress()

    @property
    def stopping(self) -> bool:
        """True once the job is about to be stopped from outside (a drain, a cancel, a
        fence, a memory recycle): checkpoint and return, or raise ``workers.Stopping``
        to hand the job back (see docs/long-jobs.md)."""
        return self.stop_reason is not None

    def checkpoint(self, state: Any, flush: bool = False) -> None:
        """Store ``state`` (JSON-serialisable) as this job's checkpoint: a later attempt
        reads it as ``current_job().resume``. The parent writes it, fenced by this
        attempt's lease, with its next lease renewal or write; ``flush=True`` waits until
        it is written. A state that is not JSON, not finite or larger than the result cap
        raises ``ValueError`` (naming the size and the cap); nothing is stored and the job
        goes on."""
        from workers.results import non_finite

        try:
            data = orjson.dumps(state)
        except TypeError as exc:
            raise ValueError(f"checkpoint state cannot be encoded as JSON: {exc}; "
                             "nothing was stored") from None
        if state is not None and b"null" in data:
            problem = non_finite(state)
            if problem is not None:
                raise ValueError(f"checkpoint state is not valid JSON: {problem} is not a "
                                 "finite number; nothing was stored")
        if b"\\u0000" in data and _holds_nul(data):
            raise ValueError("checkpoint state holds a NUL character (\\u0000), which "
                             "PostgreSQL's jsonb cannot store; nothing was stored")
        cap = self._checkpoint_cap
        if len(data) > cap:
            raise ValueError(f"checkpoint state is {len(data)} bytes of JSON, over the "
                             f"{cap}-byte cap; nothing was stored")
        self.last_checkpoint = orjson.loads(data)
        if self._send_checkpoint is not None:
            self._send_checkpoint(data, flush)

    @property
    def batch(self) -> Any:
        """The batch this job closes (a batch's callback) or belongs to, else None:
        ``.id``, ``.summary``, ``.results()`` (see ``workers.batchview``)."""
        from workers.batchview import batch_of

        return batch_of(self.id)

    def dependencies(self) -> list[Dependency]:
        """The jobs this one waited for (``depends_on``), in id order, each with how it
        ended and what it returned: ``id``, ``name`` (as its edge was named), ``kind``,
        ``state``, ``result``, ``error`` (its last error entry), ``ok``. Read from the
        database once per run; an empty list for a job without dependencies (a batch's
        callback reads its members with ``batch.results()``)."""
        if self._dependencies is None:
            from shared.dependencies import read_dependencies
            from workers.batchview import connect

            with connect() as conn:
                self._dependencies = read_dependencies(conn, self.id)
        return self._dependencies

    def dependency(self, key: int | str) -> Dependency:
        """One of ``dependencies()`` by job id, or by the name its edge was given
        (``Dep(id, name=...)`` or ``depends_on={name: id}``); ``KeyError`` if none."""
        for dep in self.dependencies():
            if dep.id == key or (isinstance(key, str) and dep.name == key):
                return dep
        raise KeyError(f"job {self.id} has no dependency {key!r}")

    def take_progress(self, seen_seq: int) -> tuple[int, dict[str, Any] | None]:
        """The latest progress if it changed since ``seen_seq`` (for the heartbeat)."""
        with self._lock:
            if self._progress_seq == seen_seq:
                return seen_seq, None
            return self._progress_seq, self._progress


def _holds_nul(data: bytes) -> bool:
    """Whether JSON text holds an escaped NUL (``\\u0000`` after an even run of
    backslashes: ``\\\\u0000`` is a backslash and the text ``u0000``)."""
    at = data.find(b"\\u0000")
    while at >= 0:
        run = 0
        while at - run - 1 >= 0 and data[at - run - 1] == 0x5C:
            run += 1
        if run % 2 == 0:
            return True
        at = data.find(b"\\u0000", at + 1)
    return False


_current: JobContext | None = None


def current_job() -> JobContext:
    """The job the calling handler is running. Raises ``RuntimeError`` outside a job."""
    if _current is None:
        raise RuntimeError("current_job() called outside a running job")
    return _current


def set_current(context: JobContext | None) -> None:
    """Install (or clear, with None) the running job's context. Child runtime only."""
    global _current
    _current = context
