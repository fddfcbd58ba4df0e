"""Handlers for the fair queue tests (issue 42), loaded with ``--app fair_handlers``: a
member that records its start (to the file named by ``E2E_LOG``) and runs 20 ms, or
``seconds``."""

import time

from e2e_handlers import record

from workers import job


@job(queue="fair")
def fair_member(batch: str, seconds: float = 0.02) -> None:
    record("run", batch=batch)
    time.sleep(seconds)


@job(queue="fair")
def fair_done() -> None:
    return None
