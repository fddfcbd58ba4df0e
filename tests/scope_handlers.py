"""Handlers for the child-scope tests (issue 45), loaded with ``--app scope_handlers`` in a
``supervisor run`` of their own (``on_child_start`` is process-wide: never imported by
pytest).

Each child starts, in ``on_child_start``, a ``ProcessPoolExecutor`` of two workers and a
helper process (``sleep``): both belong to the child. The jobs report which pids they
see, so a test can check what lives on and what is gone.
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor

from workers import child_scope, job, joblib_config, on_child_start

POOL: ProcessPoolExecutor | None = None
HELPER: subprocess.Popen | None = None
SCOPED: list[subprocess.Popen] = []


@on_child_start
def start_pool() -> None:
    global POOL, HELPER
    POOL = ProcessPoolExecutor(max_workers=2)  # its workers start at the first job
    HELPER = subprocess.Popen(["sleep", "3600"])


def _square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@job
def sc_pool(tasks: int = 8) -> dict:
    """Square ``tasks`` numbers in the child's pool; the pids involved."""
    assert POOL is not None and HELPER is not None
    answers = list(POOL.map(_square, range(tasks)))
    assert [square for _pid, square in answers] == [x * x for x in range(tasks)]
    return {"child": os.getpid(), "workers": sorted({pid for pid, _sq in answers}),
            "pool": sorted(POOL._processes or {}), "helper": HELPER.pid,
            "helper_alive": HELPER.poll() is None,
            "scoped": [p.pid for p in SCOPED if p.poll() is None]}


@job
def sc_leave() -> dict:
    """Use the pool, then leave three processes behind, outside any scope: a plain
    child, one in a session of its own, and a double-forked daemon (re-parented to the
    child when its parent exits)."""
    result = sc_pool(2)
    plain = subprocess.Popen(["sleep", "300"])
    own_session = subprocess.Popen(["sleep", "300"], start_new_session=True)
    daemon = subprocess.run(["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"],
                            check=True, capture_output=True, text=True)
    result["left"] = [plain.pid, own_session.pid, int(daemon.stdout.split()[0])]
    return result


@job
def sc_scope_in_job() -> dict:
    """Start a helper inside ``child_scope`` during a job: it outlives the job."""
    with child_scope():
        SCOPED.append(subprocess.Popen(["sleep", "3600"]))
    return {"child": os.getpid(), "scoped": SCOPED[-1].pid}


@job
def sc_check(pids: list[int]) -> dict:
    """Which of ``pids`` are alive, seen from the child."""
    return {"child": os.getpid(), "alive": [pid for pid in pids if _alive(pid)]}


def _worker_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@job(cpus=2)
def sc_joblib(tasks: int = 8, seconds: float = 0.0) -> dict:
    """One ``Parallel`` call through ``joblib_config`` (loky): the pids of loky's
    workers, those that ran a task, and how long the call took, start to results."""
    from joblib import Parallel, delayed
    from joblib.externals.loky import reusable_executor

    started = time.perf_counter()
    with joblib_config():
        pids = Parallel()(delayed(_worker_pid)(seconds) for _ in range(tasks))
    took = time.perf_counter() - started
    executor = reusable_executor._executor
    return {"child": os.getpid(), "ran_on": sorted(set(pids)), "seconds": took,
            "workers": sorted(executor._processes if executor is not None else [])}


@job
def sc_scope_then_hang(pidfile: str, seconds: float = 120.0) -> None:
    """Keep a helper in a session of its own (``child_scope``), write its pid, then run
    until the parent kills the child over its timeout."""
    with child_scope():
        SCOPED.append(subprocess.Popen(["sleep", "3600"], start_new_session=True))
    with open(pidfile, "w") as f:
        f.write(str(SCOPED[-1].pid))
    time.sleep(seconds)
