"""Reading the run log the chaos handlers write (see ``scripts.chaos.handlers``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True)
class Run:
    """One execution of a handler: which attempt, in which child, and whether it got to
    its end record (a run without one was cut short: killed, or exited on purpose)."""

    attempt: int
    pid: int
    start: float
    end: float | None = None
    ppid: int = 0  # the supervisor whose child ran it (0: not recorded)


def read_runs(path: Path) -> tuple[dict[int, list[Run]], int]:
    """Runs per job id, in log order, and the number of unreadable lines (a torn last
    line cannot happen with O_APPEND writes, so any is worth reporting)."""
    runs: dict[int, list[Run]] = {}
    open_runs: dict[tuple[int, int, int], Run] = {}
    bad = 0
    if not path.exists():
        return runs, 0
    with path.open("rb") as f:
        for line in f:
            parts = line.split()
            if len(parts) not in (5, 6) or parts[0] not in (b"S", b"E"):
                bad += 1
                continue
            job_id, attempt, pid = int(parts[1]), int(parts[2]), int(parts[3])
            when = float(parts[4])
            key = (job_id, attempt, pid)
            if parts[0] == b"S":
                run = Run(attempt, pid, when, ppid=int(parts[5]) if len(parts) == 6 else 0)
                runs.setdefault(job_id, []).append(run)
                open_runs[key] = run
            else:
                run = open_runs.pop(key, None)
                if run is None:
                    bad += 1
                else:
                    run.end = when
    return runs, bad
