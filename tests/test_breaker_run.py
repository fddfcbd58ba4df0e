"""The circuit breaker per kind with two real supervisors: 12 crashes of one kind in a
minute pause it on both, the other kinds keep running, it runs again after the
cool-down; `supervisor kinds` shows, pauses and resumes kinds by hand."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from e2e import ROOT, TESTS_DIR, Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def pause_row(dsn: str):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT extract(epoch FROM paused_until), crashes "
                            "FROM supervisor.kind_pauses WHERE kind = 'adm_crash'").fetchone()


def kinds_cli(dsn: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SUPERVISOR_DSN=dsn, PYTHONPATH=f"{TESTS_DIR}:{ROOT}")
    return subprocess.run([sys.executable, "-m", "supervisor", "kinds", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_crashes_of_a_kind_pause_it_on_every_supervisor_until_the_cooldown(dsn, tmp_path):
    log = tmp_path / "run.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("breaker_failures = 10\nbreaker_window = 60\nbreaker_cooldown = 4\n")
    args = ("-n", "2", "--config", str(config), "--poll-interval", "0.2")
    sups = [Supervisor(dsn, *args, log_path=log, app="admission_handlers") for _ in range(2)]
    try:
        # 36 ordinary exceptions (12 jobs x 3 attempts) within the window: never counted.
        raising = [enqueue("adm_raise", {}, dsn=dsn) for _ in range(12)]
        first = [enqueue("adm_crash", {}, dsn=dsn) for _ in range(12)]
        wait_until(lambda: pause_row(dsn), timeout=90, what="the breaker to trip")
        for sup in sups:
            sup.wait_for_log("kind adm_crash is paused", timeout=30)
        paused_until, crashes = pause_row(dsn)
        assert crashes > 10
        later = [enqueue("adm_crash", {}, dsn=dsn) for _ in range(3)]
        others = [enqueue("adm_hold", {"seconds": 0.05}, dsn=dsn) for _ in range(10)]
        wait_until(lambda: all(job_row(dsn, i)["state"] == "completed" for i in others),
                   timeout=60, what="the other kind's jobs")
        wait_until(lambda: all(job_row(dsn, i)["state"] == "discarded" for i in later),
                   timeout=90, what="the paused kind to run again after the cool-down")
        assert all(job_row(dsn, i)["state"] == "discarded" for i in first)
        wait_until(lambda: all(job_row(dsn, i)["state"] == "discarded" for i in raising),
                   timeout=90, what="the raising jobs to spend their attempts")
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT kind FROM supervisor.kind_pauses").fetchall() == [
                ("adm_crash",)]
    finally:
        for sup in sups:
            sup.stop()
    starts = {r["id"]: r["t"] for r in read_log(log) if r["event"] == "start"}
    # None of the later jobs started before the cool-down ended (handlers' own clocks).
    assert all(starts[i] >= float(paused_until) for i in later), (
        [starts[i] - float(paused_until) for i in later])


def test_kinds_can_be_paused_listed_and_resumed_by_hand(dsn, tmp_path):
    assert kinds_cli(dsn, "list").stdout.strip() == "no kind is paused"
    done = kinds_cli(dsn, "pause", "adm_hold")
    assert done.returncode == 0 and "paused kind 'adm_hold'" in done.stdout, done
    listed = kinds_cli(dsn, "list").stdout
    assert "adm_hold" in listed and "paused by hand" in listed
    log = tmp_path / "run.log"
    held = enqueue("adm_hold", {"seconds": 0.01}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.2", log_path=log,
                     app="admission_handlers")
    try:
        sup.wait_for_log("kind adm_hold is paused", timeout=30)
        assert job_row(dsn, held)["state"] == "available"
        done = kinds_cli(dsn, "resume", "adm_hold")
        assert done.returncode == 0 and "resumed kind 'adm_hold'" in done.stdout, done
        wait_until(lambda: job_row(dsn, held)["state"] == "completed", timeout=60,
                   what="the resumed kind's job")
    finally:
        sup.stop()
    bad = kinds_cli(dsn, "pause", "adm_hold", "--for", "soon")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad
