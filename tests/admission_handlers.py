"""Handlers for the admission, poison and breaker tests (``--app admission_handlers``).

Each run appends ``start`` and ``end`` records (``E2E_LOG``, via ``e2e_handlers.record``)
so the tests judge what ran beside what from the handlers' own account.
"""

import os
import time

from e2e_handlers import record

from workers import job


@job(max_attempts=20)
def adm_segv() -> None:
    """Dies by SIGSEGV on every attempt: a poison input."""
    record("start")
    os.kill(os.getpid(), 11)


@job(max_attempts=20, poison_after=0)
def adm_segv_tolerated() -> None:
    """Dies by SIGSEGV every time, with poison detection off for its kind."""
    record("start")
    os.kill(os.getpid(), 11)


@job(max_attempts=3)
def adm_raise() -> None:
    """An ordinary exception: never poison, never trips the breaker."""
    record("start")
    raise RuntimeError("plain failure")


@job
def adm_hold(seconds: float = 0.2, grow: int = 0) -> None:
    """Runs ``seconds``, holding ``grow`` bytes of touched memory meanwhile."""
    record("start")
    ballast = bytearray(grow) if grow else None
    if ballast is not None:
        for i in range(0, grow, 4096):
            ballast[i] = 1
    time.sleep(seconds)
    record("end")


@job
def adm_grow(megabytes: int, step: int = 16) -> int:
    """Grows to ``megabytes`` in steps while the parent samples its RSS, then holds it."""
    record("start")
    chunks = []
    for _ in range(0, megabytes, step):
        chunks.append(bytearray(step << 20))
        for i in range(0, step << 20, 4096):
            chunks[-1][i] = 1
        time.sleep(0.05)
    time.sleep(1.0)
    record("end")
    return len(chunks)


@job(max_attempts=1)
def adm_pod_job(megabytes: int, pod_megabytes: int, ledger: str, seconds: float = 0.5) -> None:
    """A job in a simulated pod of ``pod_megabytes``: it holds ``megabytes`` (touched)
    and notes that in ``ledger`` (one file per running job, as the kernel's cgroup
    accounting would count it); when the jobs running together hold more than the pod,
    the kernel's OOM killer is simulated: SIGKILL."""
    record("start")
    ballast = bytearray(megabytes << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    mine = os.path.join(ledger, str(os.getpid()))
    with open(mine, "w") as f:
        f.write(str(megabytes))
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            held = 0
            for name in os.listdir(ledger):
                try:
                    with open(os.path.join(ledger, name)) as f:
                        held += int(f.read() or 0)
                except (OSError, ValueError):
                    pass
            if held > pod_megabytes:
                os.kill(os.getpid(), 9)
            time.sleep(0.02)
    finally:
        os.unlink(mine)
    record("end")


@job(max_attempts=1)
def adm_crash() -> None:
    """Dies by SIGSEGV: what trips the kind's circuit breaker."""
    record("start")
    os.kill(os.getpid(), 11)


@job
def adm_threads() -> None:
    """Records the native pool size its child gave it (OMP_NUM_THREADS)."""
    record("start", threads=os.environ.get("OMP_NUM_THREADS"))
    record("end")


@job(cpus=2)
def ad_two_cpus() -> int:
    """Declares two CPUs on its handler only: a job enqueued by kind name gets them."""
    return os.getpid()
