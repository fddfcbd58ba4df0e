"""joblib and loky in a child: workers sized from the job, warm across jobs (issue 45).

joblib's default backend, loky, keeps one *reusable* executor per process and reuses its
workers from one ``Parallel`` call to the next. The runtime kills what a job leaves
running, so without help each job paid loky's start again (0.4 s instead of
milliseconds) and loky printed the death of its old workers into the job's output.
``joblib_config`` and ``loky_executor`` hand that executor to the child
(``workers.childscope``): its workers, and loky's resource tracker, outlive the job and
end with the child. They are sized from the job:

* workers: the CPUs the job reserved (``@job(cpus=N)``), counted as the supervisor
  counts them (the job's native threads over the child's share); 1 for a job that
  reserved none, or when ``native_threads`` is off, unless ``n_jobs`` says otherwise;
* threads per worker: the child's share of native threads (``native_threads``), set in
  each worker's BLAS/OpenMP variables, so a job's workers together use its CPUs.

A job of another size resizes the same executor (loky adds or retires workers); a
change of the other settings makes loky replace it, which costs one cold start.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from workers import nativethreads
from workers.childscope import KEEPER

# loky retires a worker idle this long; kept workers should wait for the next job.
IDLE_WORKER_SECONDS = 3600.0
_THREAD_VARIABLES = (*nativethreads.BLAS_VARIABLES, *nativethreads.OPENMP_VARIABLES,
                     *nativethreads.NUMEXPR_VARIABLES)


@dataclass(frozen=True, slots=True)
class PoolSize:
    """How many workers a job's pool gets, and how many native threads each."""

    workers: int
    threads_per_worker: int | None  # None: not sized (``native_threads = "off"``)


def job_pool_size() -> PoolSize:
    """The pool the running job is entitled to: one worker per CPU it reserved, each
    with the child's share of native threads."""
    share = nativethreads.child_threads()
    threads = nativethreads.job_threads()
    if share is None or threads is None:
        return PoolSize(1, None)
    return PoolSize(max(1, threads // share), share)


def joblib_config(n_jobs: int | None = None, **params: Any) -> Any:
    """``joblib.parallel_config`` for the running job: the loky backend, ``n_jobs`` from
    the job's CPUs (``job_pool_size``), each worker's native threads from the child's
    share, and workers kept warm for the child's later jobs. ``params`` go to
    ``parallel_config`` as they are. Use it as a context manager around ``Parallel``."""
    joblib = _import("joblib", "joblib_config")
    size = job_pool_size()
    KEEPER.keep_loky()
    return joblib.parallel_config(
        backend="loky", n_jobs=n_jobs or size.workers,
        inner_max_num_threads=size.threads_per_worker,
        idle_worker_timeout=IDLE_WORKER_SECONDS, **params)


def loky_executor(max_workers: int | None = None, **params: Any) -> Any:
    """loky's reusable executor for the running job (``executor.submit`` / ``map``),
    sized like ``joblib_config`` and kept warm for the child's later jobs. ``params``
    go to ``get_reusable_executor``. The standalone ``loky`` package if installed,
    else the copy joblib carries."""
    try:
        loky = importlib.import_module("loky")
    except ImportError:
        loky = _import("joblib.externals.loky", "loky_executor")
    size = job_pool_size()
    env = None
    if size.threads_per_worker is not None:
        env = {name: str(size.threads_per_worker) for name in _THREAD_VARIABLES}
    KEEPER.keep_loky()
    return loky.get_reusable_executor(max_workers=max_workers or size.workers,
                                      timeout=IDLE_WORKER_SECONDS, env=env, **params)


def _import(module: str, caller: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{caller} needs joblib: pip install joblib") from None
