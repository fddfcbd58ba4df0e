"""Process titles of children, so ``ps`` shows what each worker is doing.

``supervisor: worker 3 idle`` and ``supervisor: worker 3 job 4711 resize (attempt 2)``.
Without setproctitle the titles are simply not set.
"""

from __future__ import annotations

from collections.abc import Callable

_setproctitle: Callable[[str], None] | None
try:
    from setproctitle import setproctitle as _setproctitle
except ImportError:  # optional at run time; a missing title never stops a worker
    _setproctitle = None


def set_title(title: str) -> None:
    """Set this process's title as ``ps`` and ``top`` show it."""
    if _setproctitle is not None:
        _setproctitle(title)


def idle_title(worker_no: int) -> str:
    """The title of a child waiting for work."""
    return f"supervisor: worker {worker_no} idle"


def job_title(worker_no: int, job_id: int, kind: str, attempt: int) -> str:
    """The title of a child running a job."""
    return f"supervisor: worker {worker_no} job {job_id} {kind} (attempt {attempt})"
