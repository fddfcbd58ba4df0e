"""Handlers for the tests of ``supervisor.testing`` (kinds prefixed ``th_``)."""

from __future__ import annotations

import os
import time

from workers import Discard, Retry, Snooze, current_job, job

SNOOZED: dict[str, int] = {}  # key -> times snoozed, in this process


@job(queue="th")
def th_add(a: int, b: int) -> int:
    return a + b


@job(queue="th_tiles")
def th_tile(x: int) -> dict:
    return {"x": x, "square": x * x}


@job(queue="th_tiles")
def th_collect(label: str) -> dict:
    batch = current_job().batch
    members = list(batch.results())
    return {"label": label, "batch": batch.id,
            "squares": sorted(m.result["square"] for m in members),
            "states": sorted({m.state for m in members})}


@job(queue="th", max_attempts=3)
def th_always_fails(key: str) -> None:
    raise ValueError(f"broken {key} at attempt {current_job().attempt}")


@job(queue="th", max_attempts=5)
def th_fails_until(ok_at: int) -> int:
    attempt = current_job().attempt
    if attempt < ok_at:
        raise RuntimeError(f"not yet at attempt {attempt}")
    return attempt


@job(queue="th")
def th_discards(why: str) -> None:
    raise Discard(why)


@job(queue="th")
def th_retry_later() -> None:
    raise Retry(delay=3600, reason="upstream busy")


@job(queue="th")
def th_snooze_once(key: str, delay: float = 0) -> str:
    if SNOOZED.get(key, 0) == 0:
        SNOOZED[key] = 1
        raise Snooze(delay)
    return f"{key} after snooze, attempt {current_job().attempt}"


@job(queue="th")
def th_progress() -> None:
    current_job().progress(2, 3, "two of three")


@job(queue="th")
def th_pid() -> dict:
    ctx = current_job()
    return {"pid": os.getpid(), "id": ctx.id, "attempt": ctx.attempt, "queue": ctx.queue}


@job(queue="th", max_attempts=1)
def th_crash() -> None:
    os._exit(3)


@job(queue="th", max_attempts=1, timeout=0.5)
def th_sleeps(seconds: float) -> None:
    time.sleep(seconds)


@job(queue="th")
def th_nan() -> float:
    return float("nan")


@job(queue="th_steps")
def th_step(name: str) -> str:
    return name


@job(queue="th_interrupt")
def th_interrupted(how: str) -> None:
    if how == "ctrl-c":
        raise KeyboardInterrupt
    if how == "pytest.fail":
        import pytest

        pytest.fail("failed from inside the handler")
    raise SystemExit(3)


@job(queue="th_forever")
def th_snoozes_forever() -> None:
    raise Snooze(0)


@job(queue="th", max_attempts=3)
def th_resumes(steps: int) -> dict:
    """Checkpoints half way and fails on its first attempt; the next resumes."""
    ctx = current_job()
    if ctx.resume is None:
        ctx.checkpoint({"next": steps // 2}, flush=True)
        raise RuntimeError("lost half way")
    return {"resumed_at": ctx.resume["next"], "attempt": ctx.attempt}
