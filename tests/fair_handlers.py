"""Handlers for the fair queue tests (issue 42), loaded with ``--app fair_handlers``: a
member that records its start (to the file named by ``E2E_LOG``) and runs 20 ms."""

import time

from e2e_handlers import record

from workers import job


@job(queue="fair")
def fair_member(batch: str) -> None:
    record("run", batch=batch)
    time.sleep(0.02)


@job(queue="fair")
def fair_done() -> None:
    return None
