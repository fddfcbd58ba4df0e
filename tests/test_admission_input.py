"""Bad reservations and budgets are refused before anything is written or started
(one line, non-zero exit); good ones reach the row, through every form of enqueue."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e import ROOT, TESTS_DIR, job_row, run_burst

from shared.enqueue import enqueue, enqueue_many
from supervisor.config import ConfigError, build_config
from workers import job

BAD = [({"cpus": 0}, "cpus"), ({"cpus": -1}, "cpus"), ({"cpus": 1025}, "cpus"),
       ({"cpus": 1.5}, "cpus"), ({"cpus": True}, "cpus"), ({"memory": 0}, "memory"),
       ({"memory": -5}, "memory"), ({"memory": "lots"}, "memory"),
       ({"memory": "2TiB"}, "memory"), ({"memory": "0MiB"}, "memory")]


def count(conn) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0]


@pytest.mark.parametrize(("options", "word"), BAD)
def test_a_bad_reservation_is_refused_by_every_form_and_nothing_is_written(conn, options,
                                                                          word):
    for call in (lambda: enqueue("k", {}, conn=conn, **options),
                 lambda: enqueue("k", {}, conn=conn, delay=5, **options),
                 lambda: enqueue_many("k", [{}, {}], conn=conn, **options)):
        with pytest.raises(ValueError, match=word):
            call()
    assert count(conn) == 0
    with pytest.raises(ValueError, match=word):
        job(name=f"adm_bad_{word}_{options[word]!r}", **options)(lambda: None)


def test_reservations_reach_the_row_through_every_form(conn):
    one = enqueue("k", {}, conn=conn, cpus=4, memory="6GiB")
    keyed = enqueue("k", {}, conn=conn, memory=1 << 20, unique_key="u")
    many = enqueue_many("k", [{}, {}], conn=conn, cpus=2)

    @job(name="adm_declared", cpus=3, memory="512MiB")
    def declared() -> None:
        pass

    handle_id = declared.options(conn=conn).enqueue()
    override_id = declared.options(conn=conn, memory="1GiB").enqueue()
    plain = enqueue("k", {}, conn=conn)
    rows = dict((i, (c, m)) for i, c, m in conn.execute(
        "SELECT id, cpus, memory FROM supervisor.jobs"))
    assert rows[one] == (4, 6 << 30)
    assert rows[keyed] == (None, 1 << 20)
    assert [rows[i] for i in many] == [(2, None), (2, None)]
    assert rows[handle_id] == (3, 512 << 20)
    assert rows[override_id] == (3, 1 << 30)
    assert rows[plain] == (None, None)


def test_batches_carry_the_reservation_and_what_cannot_carry_it_refuses(conn):
    from shared.batches import Callback

    ids = enqueue_many("k", [{}, {}], conn=conn, memory="1MiB",
                       then=Callback("done", {}))
    rows = conn.execute("SELECT memory FROM supervisor.jobs WHERE id = ANY(%s)",
                        (list(ids.ids),)).fetchall()
    assert rows == [(1 << 20,), (1 << 20,)]
    with pytest.raises(ValueError, match="callback cannot reserve"):
        Callback("done", {}, cpus=2)
    with pytest.raises(ValueError, match="depends_on cannot be combined with cpus"):
        enqueue("k", {}, conn=conn, depends_on=list(ids.ids), cpus=2)


def _cli(*args: str, dsn: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SUPERVISOR_DSN=dsn, PYTHONPATH=f"{TESTS_DIR}:{ROOT}")
    return subprocess.run([sys.executable, "-m", "supervisor", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_the_enqueue_command_refuses_a_bad_reservation_in_one_line(dsn, conn):
    for flags in (["--cpus", "0"], ["--memory", "lots"], ["--memory", "5TiB"]):
        done = _cli("enqueue", "k", *flags, dsn=dsn)
        assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done
    assert count(conn) == 0
    done = _cli("enqueue", "k", "--cpus", "2", "--memory", "600MiB", dsn=dsn)
    assert done.returncode == 0, done.stderr
    assert conn.execute("SELECT cpus, memory FROM supervisor.jobs").fetchall() == [
        (2, 600 << 20)]


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["10MiB", "lots", "1000"])
def test_run_refuses_a_bad_memory_budget_before_starting(dsn, budget):
    done = _cli("run", "--app", "admission_handlers", "--memory-budget", budget, dsn=dsn)
    assert done.returncode != 0
    assert "memory_budget" in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
        done.stderr
    assert "starting" not in done.stderr


def test_a_budget_in_the_config_file_is_checked_too():
    with pytest.raises(ConfigError, match="memory_budget"):
        build_config({"memory_budget": "32MiB"})
    assert build_config({"memory_budget": "1GiB"}).memory_budget == 1 << 30
    assert build_config({"admission_patience": "2m"}).admission_patience == 120.0


def test_a_handlers_reservation_binds_jobs_enqueued_by_kind_name(dsn):
    """``@job(cpus=2)`` holds for a job whose row leaves cpus out (the CLI, SQL, a kind
    name): a one-child supervisor does not serve the kind (says so, leaves the job
    waiting, exits its burst), a two-child one runs it."""
    job_id = enqueue("ad_two_cpus", dsn=dsn)
    small = run_burst(dsn, "-n", "1", app="admission_handlers")
    assert "kind ad_two_cpus needs 2 CPUs, this supervisor has 1 (-n)" in small.err, small.err
    assert job_row(dsn, job_id)["state"] == "available"
    run_burst(dsn, "-n", "2", app="admission_handlers")
    assert job_row(dsn, job_id)["state"] == "completed"
