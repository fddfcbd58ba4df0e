"""Signals to a real supervisor: drain on TERM/INT, stop at once on a second signal or
QUIT, recycle on HUP, grow and shrink on TTIN/TTOU, and death by SIGKILL."""

import signal
import time

import psycopg
import pytest
from e2e import Supervisor, job_row, read_log, state_counts, wait_until

from shared.enqueue import enqueue, enqueue_many
from supervisor.signals import DUPLICATE_WINDOW

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]  # real supervisors: CI lane


def started(log, n=1):
    return lambda: len([r for r in read_log(log) if r["event"] == "start"]) >= n


def running_in_db(dsn, n):
    return lambda: state_counts(dsn).get("running", 0) >= n


def test_sigterm_lets_a_running_job_finish_within_grace(dsn, tmp_path):
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    job_id = enqueue("e2e_wait_for", {"path": str(gate)}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--grace", "30", log_path=log)
    try:
        wait_until(started(log), what="job start")
        sup.signal(signal.SIGTERM)
        sup.wait_for_log("draining")
        late = enqueue("e2e_noop", dsn=dsn)  # arrives during the drain: not claimed
        gate.touch()
        assert sup.wait(30) == 0
    finally:
        sup.stop()
    assert job_row(dsn, job_id)["state"] == "completed"
    assert job_row(dsn, late)["state"] == "available"


def test_sigterm_releases_claimed_jobs_that_had_not_started(dsn, tmp_path):
    # The three queued in the child's pipe come back once it has exited (its exit is
    # what proves it never started them), after the running job ends.
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    ids = enqueue_many("e2e_wait_for", [{"path": str(gate)}] * 4, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--prefetch", "4", "--grace", "30", log_path=log)
    try:
        wait_until(started(log), what="first job start")
        wait_until(running_in_db(dsn, 4), what="four jobs claimed")
        sup.signal(signal.SIGTERM)
        sup.wait_for_log("draining")
        gate.touch()
        assert sup.wait(30) == 0
    finally:
        sup.stop()
    rows = [job_row(dsn, i) for i in ids]
    assert sorted(r["state"] for r in rows) == ["available"] * 3 + ["completed"]
    assert len([r for r in read_log(log) if r["event"] == "start"]) == 1  # none of the 3 ran
    for row in rows:
        if row["state"] == "available":
            assert row["attempt"] == 0  # the claim was not counted
            assert row["errors"] == []
            assert row["lease_owner"] is None


def test_job_still_running_at_end_of_grace_goes_back(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_wait_for", {"path": str(tmp_path / "never")}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--grace", "1", log_path=log)
    try:
        wait_until(started(log), what="job start")
        t0 = time.monotonic()
        sup.signal(signal.SIGTERM)
        assert sup.wait(20) == 0
        assert time.monotonic() - t0 < 10
    finally:
        sup.stop()
    row = job_row(dsn, job_id)
    assert row["state"] == "available"
    assert row["attempt"] == 0
    assert row["errors"][0]["kind"] == "shutdown"
    assert not _alive([r["pid"] for r in read_log(log)])


@pytest.mark.parametrize("signals", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT,
                                     signal.SIGINT), (signal.SIGQUIT,)])
def test_second_signal_or_quit_stops_at_once(dsn, tmp_path, signals):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_wait_for", {"path": str(tmp_path / "never")}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--grace", "60", log_path=log)
    try:
        wait_until(started(log), what="job start")
        t0 = time.monotonic()
        sup.signal(signals[0])
        if len(signals) > 1:
            # The first one must have been handled, or the kernel folds the two into one;
            # and a SIGTERM within DUPLICATE_WINDOW of the first is the same stop.
            sup.wait_for_log("draining")
            time.sleep(DUPLICATE_WINDOW + 0.1)
            sup.signal(signals[1])
        assert sup.wait(20) == 0
        assert time.monotonic() - t0 < 10  # far less than the 60 s grace
    finally:
        sup.stop()
    row = job_row(dsn, job_id)
    assert row["state"] == "available"
    assert row["errors"][-1]["kind"] == "shutdown"


def test_hup_recycles_children_and_work_goes_on(dsn, tmp_path):
    log = tmp_path / "runs.log"
    sup = Supervisor(dsn, "-n", "2", log_path=log)
    try:
        before = set(wait_until(lambda: len(sup.children()) == 2 and sup.children()))
        sup.signal(signal.SIGHUP)
        wait_until(lambda: len(set(sup.children()) - before) == 2, what="two new children")
        ids = enqueue_many("e2e_noop", [{"n": i} for i in range(10)], dsn=dsn)
        wait_until(lambda: all(job_row(dsn, i)["state"] == "completed" for i in ids))
        assert not {r["pid"] for r in read_log(log)} & before
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        sup.stop()


def test_ttin_and_ttou_change_the_number_of_children(dsn):
    sup = Supervisor(dsn, "-n", "2")
    try:
        wait_until(lambda: len(sup.children()) == 2, what="2 children")
        sup.signal(signal.SIGTTIN)
        wait_until(lambda: len(sup.children()) == 3, what="3 children")
        # Standard signals do not queue: wait for each to act before sending the next.
        sup.signal(signal.SIGTTOU)
        wait_until(lambda: len(sup.children()) == 2, what="2 children again")
        sup.signal(signal.SIGTTOU)
        wait_until(lambda: len(sup.children()) == 1, what="1 child")
        ids = enqueue_many("e2e_noop", [{"n": i} for i in range(5)], dsn=dsn)
        wait_until(lambda: all(job_row(dsn, i)["state"] == "completed" for i in ids))
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        sup.stop()


def test_sigkill_of_the_supervisor_takes_its_children(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_wait_for", {"path": str(tmp_path / "never")}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--lease-ttl", "30", log_path=log)
    try:
        wait_until(started(log), what="job start")
        children = sup.children()
        assert len(children) == 2
        sup.signal(signal.SIGKILL)
        sup.wait(10)
        wait_until(lambda: not _alive(children), timeout=10, what="children to die")
    finally:
        sup.stop()
    # The job stays leased to the dead supervisor until its lease expires.
    with psycopg.connect(dsn, autocommit=True) as conn:
        state, expires_in = conn.execute(
            "SELECT state, extract(epoch FROM lease_expires_at - now()) FROM supervisor.jobs "
            "WHERE id = %s", (job_id,)).fetchone()
    assert state == "running" and expires_in > 0


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] != "Z":
                    alive.append(pid)
        except FileNotFoundError:
            pass
    return alive


def test_unreachable_database_at_start_is_one_line_and_exit_1():
    sup = Supervisor("postgresql://nobody:s3cret@127.0.0.1:1/none?connect_timeout=2", "-n", "1")
    code = sup.wait(30)
    assert code == 1
    lines = [line for line in sup.err.splitlines() if line.strip()]
    assert len(lines) == 1, sup.err
    assert lines[0].startswith("supervisor: error:")
    assert "127.0.0.1" in lines[0]
    assert "s3cret" not in sup.err
