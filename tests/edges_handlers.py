"""Handlers for the edge tests (``--app edges_handlers``).

With ``EDGES_GATE=<path>`` set, importing this module creates ``<path>.importing`` and
then waits (up to 60 s) until ``<path>`` exists: the test holds ``supervisor run`` inside
its start-up, after the CLI's early set-up and before the arbiter, sends a signal or
reads the process title there, then opens the gate.
"""

import os
import time

from workers import job

_gate = os.environ.get("EDGES_GATE")
if _gate:
    with open(_gate + ".importing", "w"):
        pass
    _deadline = time.monotonic() + 60
    while not os.path.exists(_gate) and time.monotonic() < _deadline:
        time.sleep(0.01)


@job
def edges_sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@job(max_attempts=1)
def edges_fail_escape() -> None:
    raise ValueError("bad \x1b[31mred\x1b[0m \u202etxt.exe")


@job
def edges_orphan(marker: str) -> None:
    """Leave a grandchild behind that outlives its parent, then exits."""
    pid = os.fork()
    if pid == 0:  # the middle process: fork the orphan-to-be and leave at once
        if os.fork() == 0:
            time.sleep(0.3)
            with open(marker, "w"):
                pass
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
