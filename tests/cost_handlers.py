"""Handlers for the tests of a job's whole-tree CPU and of /dev/shm hygiene (issue 47),
loaded with ``--app cost_handlers``. Each hands work to processes the way real
pipelines do (a helper left running, a zombie, a grandchild, joblib's loky workers)
and reports what those processes measured themselves, so a test can hold the
supervisor's ``cpu_seconds`` against it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

from workers import job

# Spins `seconds` of its own CPU, prints DONE, then (unless told to exit) sleeps until
# it is killed: work done by a process that outlives the job.
_SPIN = ("import resource, sys, time\n"
         "def cpu():\n"
         "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
         "    return r.ru_utime + r.ru_stime\n"
         "start = cpu()\n"
         "while cpu() - start < float(sys.argv[1]): pass\n"
         "print('DONE', cpu() - start, flush=True)\n"
         "if sys.argv[2] == 'stay': time.sleep(3600)\n")


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _helper(seconds: float, after: str, **kwargs: object) -> tuple[subprocess.Popen, float]:
    """A helper process spinning ``seconds``; returns it and the CPU it reported."""
    proc = subprocess.Popen([sys.executable, "-c", _SPIN, str(seconds), after],
                            stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    return proc, float(line[1])


@job(max_attempts=1)
def cost_helper_left(seconds: float = 2.0) -> dict:
    """Hand ``seconds`` of CPU to a helper in its own session that is still running
    when the job returns (the runtime kills it after the job)."""
    proc, used = _helper(seconds, "stay", start_new_session=True)
    return {"helper_cpu": used, "pid": proc.pid}


@job(max_attempts=1)
def cost_zombie(seconds: float = 1.0) -> dict:
    """Fork a process that spins ``seconds`` and exits; never wait for it (a zombie at
    the job's end, reaped by the runtime)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        start = _cpu()
        while _cpu() - start < seconds:
            pass
        os.write(write_end, f"{_cpu() - start}".encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        used = float(f.read())
    # Until the fork is gone, so it ends within the job, a zombie.
    while True:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f2:
                if f2.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
        except OSError:
            break
        time.sleep(0.01)
    return {"helper_cpu": used, "pid": pid}


@job(max_attempts=1)
def cost_grandchild(seconds: float = 1.0) -> dict:
    """Run a shell that runs a helper to its end (reaped by the shell mid-job), and a
    second helper whose parent exits first (re-parented to the child, then reaped)."""
    code = _SPIN.replace("flush=True)", "file=sys.stderr, flush=True)")
    shell = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -c "$0" {seconds} exit; echo $?', code],
        capture_output=True, text=True, check=True)
    used = float(shell.stderr.split()[1])
    # The intermediate exits at once; the grandchild spins on as an orphan.
    orphan = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -c "$0" {seconds} exit >&2 & exit 0', code],
        stderr=subprocess.PIPE, text=True)
    assert orphan.stderr is not None
    used += float(orphan.stderr.readline().split()[1])
    orphan.wait()
    return {"helper_cpu": used}


@job(max_attempts=1)
def cost_quiet() -> int:
    """No work at all: its CPU must not carry the previous job's helpers."""
    return 0


def _joblib_task(seconds: float) -> float:
    start = _cpu()
    while _cpu() - start < seconds:
        pass
    return _cpu() - start


@job(max_attempts=1)
def cost_joblib(tasks: int = 4, seconds: float = 0.5, n_jobs: int = 2,
                array_kb: int = 0) -> dict:
    """A joblib ``Parallel`` over loky workers, as a scikit-learn sweep runs it; with
    ``array_kb``, each task also gets an array that large (joblib memmaps large ones
    through a folder in /dev/shm). Returns the CPU the workers measured."""
    from joblib import Parallel, delayed

    def run() -> list[float]:
        if array_kb:
            import numpy as np

            data = np.ones(array_kb * 128)  # 8-byte floats
            return Parallel(n_jobs=n_jobs, backend="loky", max_nbytes="1K")(
                delayed(_joblib_array_task)(seconds, data) for _ in range(tasks))
        return Parallel(n_jobs=n_jobs, backend="loky")(
            delayed(_joblib_task)(seconds) for _ in range(tasks))

    used = run()  # no retry: the runtime retires the last job's executor (issue 45)
    return {"helper_cpu": sum(used), "pid": os.getpid(), "seen": _named_for_me()}


def _named_for_me() -> list[str]:
    """The /dev/shm entries whose name carries this process's pid."""
    from workers.shm import listing, pid_tokens

    me = os.getpid()
    return sorted(name for name in listing() if me in pid_tokens(name))


@job(max_attempts=1)
def cost_shm_census() -> dict:
    """The /dev/shm entries named for this child, after earlier jobs in it."""
    return {"pid": os.getpid(), "seen": _named_for_me()}


@job(max_attempts=1)
def cost_shm_share(path: str, make: str) -> dict:
    """Map an existing /dev/shm file and leave a helper holding it open (killed after
    the job): the file is someone else's and must stay. The helper also creates
    ``make`` (a name with no pid in it) and holds it open: that one is the job's."""
    import mmap

    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0)
    helper = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\nf = open(sys.argv[1])\n"
                               "g = open(sys.argv[2], 'w')\n"
                               "print('OPEN', flush=True)\ntime.sleep(3600)\n",
                               path, make],
                              stdout=subprocess.PIPE, text=True)
    assert helper.stdout is not None
    helper.stdout.readline()
    mapped.close()
    return {"pid": os.getpid()}


def _joblib_array_task(seconds: float, data: object) -> float:
    return _joblib_task(seconds) + 0 * float(data.sum())  # type: ignore[attr-defined]


@job(max_attempts=1)
def cost_joblib_hang(report: str) -> None:
    """Start loky's workers, write this child's pid and the /dev/shm entries named for
    it to ``report``, then wait until the parent kills the child (its timeout)."""
    from joblib import Parallel, delayed

    Parallel(n_jobs=2, backend="loky")(delayed(_joblib_task)(0.0) for _ in range(2))
    with open(report + ".tmp", "w") as f:
        f.write(" ".join([str(os.getpid()), *_named_for_me()]))
    os.replace(report + ".tmp", report)
    time.sleep(3600)


@job(max_attempts=1)
def cost_mp_pool(tasks: int = 8, seconds: float = 0.25) -> dict:
    """A ``multiprocessing`` pool whose workers exit after each task: its own thread
    reaps them all through the job, racing the meter's reads."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
        used = pool.map(_joblib_task, [seconds] * tasks)
    return {"helper_cpu": sum(used)}


@job(max_attempts=1)
def cost_many_sleepers(count: int = 200) -> dict:
    """Leave ``count`` idle processes (a fork bomb's start): the job's CPU stays its own
    and the runtime still reaps them all."""
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        pids.append(pid)
    return {"pids": pids}
