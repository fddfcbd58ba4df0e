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
