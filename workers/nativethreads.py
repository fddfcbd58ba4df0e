"""Native thread pools sized to the child's share of the CPUs.

numpy's OpenBLAS, MKL, OpenMP runtimes and numexpr each start one thread per core in
every process that loads them: N children on N cores then run N * N threads, and a
pipeline of matrix products ran 3 to 5 times slower than with one thread per child.
Each child therefore limits them to ``threads`` (the supervisor's ``native_threads``,
``max(1, cpus // children)`` by default) before its first job, two ways:

- environment variables, for libraries its handlers load later (a pool reads them
  when the library starts);
- ``threadpoolctl``, for libraries already loaded, which the app imported in the parent
  before the fork: their pools exist and no longer read the environment.

A variable the user set is left alone, and so is every pool it governs.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")
OPENMP_VARIABLES = ("OMP_NUM_THREADS",)
NUMEXPR_VARIABLES = ("NUMEXPR_NUM_THREADS",)

# Names in /proc/self/maps of the shared libraries whose pools threadpoolctl can size.
_POOL_LIBRARIES = (b"openblas", b"libblas", b"mkl_rt", b"libmkl", b"blis", b"libgomp",
                   b"libiomp", b"libomp", b"vcomp")


class Limited(NamedTuple):
    """What ``limit`` did: the variables it set, and the APIs (``blas``, ``openmp``,
    ``numexpr``) whose loaded pools it resized."""

    variables: tuple[str, ...]
    loaded: tuple[str, ...]


def pools_loaded() -> bool:
    """Whether this process has loaded a library with a native thread pool (one look
    at ``/proc/self/maps``; False if it cannot be read)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read().lower()
    except OSError:
        return False
    return any(name in maps for name in _POOL_LIBRARIES)


# The parent's last look at its own mappings (``prepare``): how many modules it had
# imported then, and whether a pool library was among what it had loaded. A child forked
# after it maps exactly what the parent did, so its ``limit`` at boot takes this look
# instead of reading /proc/self/maps itself: that read was 0.8 ms of a new child's boot,
# whose CPU from the fork to its first job went from 3.96 to 3.32-3.52 ms (medians of 64
# children, issue 48). None: never looked (a process that is no
# supervisor's child reads its own maps). ``resize``, later, reads the child's own: a
# handler may have loaded a pool since.
_parent_look: tuple[int, bool] | None = None


def prepare() -> None:
    """In the parent, before each fork: look at what it has loaded, unless no module was
    imported since the last look (a library comes with the module that loads it), and
    import ``threadpoolctl`` once if a pool library is there, so no child pays for the
    import."""
    global _parent_look
    if _parent_look is not None and _parent_look[0] == len(sys.modules):
        return
    loaded = pools_loaded()
    if loaded:
        try:
            import threadpoolctl  # noqa: F401
        except ImportError:
            pass
    _parent_look = (len(sys.modules), loaded)


def loaded_at_fork() -> bool:
    """Whether a pool library is loaded in this process: in a child, as its parent saw
    it just before the fork (``prepare``); elsewhere from /proc/self/maps."""
    look = _parent_look
    return look[1] if look is not None else pools_loaded()


# What ``limit`` set at the child's boot: ``resize`` changes only these pools, never one
# whose variable the user set.
_ours: Limited | None = None
_current: int | None = None
_child: int | None = None  # the share ``limit`` set at boot; ``_current`` is the job's


def limit(threads: int, environ: os._Environ[str] | dict[str, str] = os.environ) -> Limited:
    """Limit this process's native pools to ``threads`` threads, except those whose
    variables the user set."""
    value = str(threads)
    user_blas = any(name in environ for name in BLAS_VARIABLES)
    user_openmp = any(name in environ for name in OPENMP_VARIABLES)
    user_numexpr = any(name in environ for name in NUMEXPR_VARIABLES)
    variables = []
    for names, users in ((BLAS_VARIABLES, user_blas), (OPENMP_VARIABLES, user_openmp),
                         (NUMEXPR_VARIABLES, user_numexpr)):
        if not users:
            for name in names:
                environ[name] = value
                variables.append(name)
    loaded = []
    apis = [api for api, users in (("blas", user_blas), ("openmp", user_openmp))
            if not users]
    if apis and loaded_at_fork():
        try:
            import threadpoolctl
        except ImportError:
            pass  # a runtime dependency; without it only the variables hold
        else:
            controller = threadpoolctl.ThreadpoolController()
            for api in apis:
                if controller.select(user_api=api).lib_controllers:
                    controller.limit(limits=threads, user_api=api)
                    loaded.append(api)
    numexpr = sys.modules.get("numexpr")
    if numexpr is not None and not user_numexpr:
        numexpr.set_num_threads(threads)
        loaded.append("numexpr")
    global _ours, _current, _child
    _ours, _current, _child = Limited(tuple(variables), tuple(loaded)), threads, threads
    return _ours


def child_threads() -> int | None:
    """The child's own share of native threads (``native_threads``); None: not sized."""
    return _child


def job_threads() -> int | None:
    """The native threads of the job running now: the child's share, times the CPUs it
    reserved (``resize``); None: not sized."""
    return _current


def resize(threads: int, environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Size the pools ``limit`` governs to ``threads`` for one job (a job that reserved
    several CPUs gets their share; the next job sizes them back). Nothing when ``limit``
    never ran or they have that size already."""
    global _current
    ours = _ours
    if ours is None or threads == _current:
        return
    value = str(threads)
    for name in ours.variables:
        environ[name] = value
    apis = [api for api, names in (("blas", BLAS_VARIABLES), ("openmp", OPENMP_VARIABLES))
            if any(name in ours.variables for name in names)]
    if apis and pools_loaded():  # its own maps: a handler may have loaded one since
        try:
            import threadpoolctl
        except ImportError:
            pass
        else:
            controller = threadpoolctl.ThreadpoolController()
            for api in apis:
                if controller.select(user_api=api).lib_controllers:
                    controller.limit(limits=threads, user_api=api)
    numexpr = sys.modules.get("numexpr")
    if numexpr is not None and "NUMEXPR_NUM_THREADS" in ours.variables:
        numexpr.set_num_threads(threads)
    _current = threads
