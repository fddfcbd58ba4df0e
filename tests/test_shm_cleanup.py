"""Nothing a job's processes leave in /dev/shm outlives the child that ran them (issue
47): loky's semaphores and joblib's memmapping folders go when the job's processes are
reaped and when the child recycles; an entry someone else made or still uses stays.
The janitor's rules on a directory of its own first, then real ``supervisor run``
children on the real /dev/shm."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import uuid

import pytest
from e2e import Supervisor, job_row, run_burst, wait_until

from shared.enqueue import enqueue
from workers.shm import SHM_DIR, ShmJanitor, listing, pid_tokens, remove_for_dead_child

pytestmark = [pytest.mark.timeout(600)]

HAS_JOBLIB = importlib.util.find_spec("joblib") is not None
needs_joblib = pytest.mark.skipif(not HAS_JOBLIB,
                                  reason="joblib is not installed (the test extra has it)")


def test_pid_tokens_are_runs_of_digits_between_separators():
    assert pid_tokens("sem.loky-812-x1y2") == {812}
    assert pid_tokens("joblib_memmapping_folder_4411_9ab_77") == {4411, 77}
    assert pid_tokens("torch_123_456") == {123, 456}
    assert pid_tokens("sem.loky-812-3o5hu5qy") == {812}  # "3o5..." is not a pid
    assert pid_tokens("PostgreSQL.3780207184") == set()  # longer than any pid
    assert pid_tokens("psm_2f0c91ab") == set()


def _sleeper(*paths: str) -> subprocess.Popen:
    """A process holding ``paths`` open until killed."""
    code = ("import sys, time\nfs = [open(p) for p in sys.argv[1:]]\n"
            "print('OPEN', flush=True)\ntime.sleep(3600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, *paths], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "OPEN\n"
    return proc


def test_the_janitor_removes_what_the_tree_names_or_uses_and_nothing_else(tmp_path):
    old = tmp_path / "sem.loky-1-old"  # there before the janitor started
    old.write_text("")
    janitor = ShmJanitor(str(tmp_path))
    worker = _sleeper(str(old))
    try:
        named = tmp_path / f"sem.loky-{worker.pid}-abc"
        named.write_text("")
        folder = tmp_path / f"joblib_memmapping_folder_{os.getpid()}_abc_def"
        folder.mkdir()
        (folder / "a.pkl").write_text("x")
        used = tmp_path / "psm_abcdef"
        used.write_text("")
        shared = tmp_path / "shared_by_another"
        shared.write_text("")
        other = tmp_path / "sem.loky-999999-zz"  # another process's pid
        other.write_text("")
        quiet = tmp_path / "nobody_uses_me"
        quiet.write_text("")
        holder = _sleeper(str(shared))  # outside the tree, still using it
        user = _sleeper(str(used), str(shared))
        try:
            janitor.before_reap([worker.pid, user.pid])
            for proc in (worker, user):
                proc.kill()
                proc.wait()
            assert janitor.after_reap() == 3
            assert sorted(listing(str(tmp_path))) == sorted(
                ["sem.loky-1-old", "shared_by_another", "sem.loky-999999-zz",
                 "nobody_uses_me"])
        finally:
            holder.kill()
            holder.wait()
    finally:
        worker.kill()
        worker.wait()
    # At the child's exit: what names the child goes, what it does not name stays.
    mine = tmp_path / f"torch_{os.getpid()}_1"
    mine.write_text("")
    assert janitor.at_exit() == 1
    assert not mine.exists() and quiet.exists() and old.exists()


def test_a_link_goes_but_not_what_it_points_to_and_an_older_namesake_stays(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("x")
    shm = tmp_path / "shm"
    shm.mkdir()
    older = shm / f"sem.loky-{os.getpid()}-older"  # named for us, there before the start
    older.write_text("")
    janitor = ShmJanitor(str(shm))
    link = shm / f"torch_{os.getpid()}_link"
    link.symlink_to(target)
    assert janitor.at_exit() == 1
    assert not link.exists() and (target / "precious").exists() and older.exists()


class _Tracker:
    """A pool's resource tracker as the child sees it: the entries it was told to
    unlink go after ``polls`` of the child's looks."""

    def __init__(self, paths, polls: int) -> None:
        self.paths, self.polls, self.looks = list(paths), polls, 0

    def sleep(self, _seconds: float) -> None:
        self.looks += 1
        if self.looks == self.polls:
            for path in self.paths:
                path.unlink()


def test_settle_waits_for_a_trackers_unlinks_and_not_for_what_the_child_still_uses(tmp_path):
    janitor = ShmJanitor(str(tmp_path))
    released = [tmp_path / f"sem.loky-{os.getpid()}-r{i}" for i in range(3)]
    for path in released:
        path.write_text("")
    kept = tmp_path / f"sem.loky-{os.getpid()}-kept"  # a pool the child keeps maps it
    kept.write_text("")
    another = tmp_path / "sem.loky-999999-x"  # another process's: never waited for
    another.write_text("")
    tracker = _Tracker(released, polls=4)
    with open(kept):
        assert janitor.settle(5.0, sleep=tracker.sleep) is True
    assert tracker.looks == 4  # it waited for the tracker, and no longer
    assert kept.exists() and another.exists()  # it removes nothing itself


def test_settle_gives_up_at_its_timeout_and_leaves_the_entries_to_the_tracker(tmp_path):
    janitor = ShmJanitor(str(tmp_path))
    slow = tmp_path / f"sem.loky-{os.getpid()}-slow"
    slow.write_text("")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert janitor.settle(0.05, sleep=sleep, clock=lambda: now[0]) is False
    assert 0.05 <= now[0] < 0.06 and slow.exists()


def test_a_dead_childs_entries_go_unless_a_process_outside_its_group_uses_them(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    unused = tmp_path / f"sem.loky-{dead.pid}-a"
    used = tmp_path / f"sem.loky-{dead.pid}-b"
    second = tmp_path / f"x_1_{dead.pid}"  # its pid, but not the first in the name
    for path in (unused, used, second):
        path.write_text("")
    holder = _sleeper(str(used))
    try:
        assert remove_for_dead_child(dead.pid, str(tmp_path)) == 1
        assert not unused.exists() and used.exists() and second.exists()
    finally:
        holder.kill()
        holder.wait()


def burst(dsn: str, *args: str) -> None:
    run_burst(dsn, "-n", "1", "--poll-interval", "0.1", *args, app="cost_handlers",
              timeout=500)


def _named_for(pids: set[int]) -> list[str]:
    return sorted(name for name in listing() if pid_tokens(name) & pids)


@pytest.mark.slow
@needs_joblib
def test_joblib_jobs_and_a_recycle_leave_nothing_in_dev_shm(dsn):
    # 25 jobs: each respawns loky (about 1.3 s), so 50 cost a minute of CI for nothing
    # that 25 with two recycles do not show.
    jobs = []
    for n in range(25):
        # Every fifth memmaps its array through a joblib folder in /dev/shm.
        args = {"tasks": 2, "seconds": 0.0, "array_kb": 64 if n % 5 == 0 else 0}
        jobs.append(enqueue("cost_joblib", args, dsn=dsn))
        if n % 5 == 4:
            jobs.append(enqueue("cost_shm_census", {}, dsn=dsn))
    # A recycle every 10 jobs or so (the limit is jittered): the burst's last child exits.
    burst(dsn, "--max-jobs-per-child", "10")
    rows = [job_row(dsn, job_id) for job_id in jobs]
    assert [row["errors"] for row in rows if row["state"] != "completed"] == []
    children = {row["result"]["pid"] for row in rows}
    seen = [name for row in rows if row["kind"] == "cost_joblib"
            for name in row["result"]["seen"]]
    # The jobs did make entries named for their child while they ran ...
    assert any(name.startswith("sem.loky-") for name in seen), seen
    assert any(name.startswith("joblib_memmapping_folder_") for name in seen), seen
    assert len(children) >= 2, children  # the child recycled
    # ... and a later job in the same child finds none of them,
    for row in rows:
        if row["kind"] == "cost_shm_census":
            assert row["result"]["seen"] == [], row["result"]
    # nor does anyone once the children are gone.
    assert _named_for(children) == []


@pytest.mark.slow
def test_an_entry_another_process_still_uses_stays_and_the_jobs_own_goes(dsn):
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", app="cost_handlers")
    shared = f"{SHM_DIR}/h6-shared-{uuid.uuid4().hex}"
    made = f"{SHM_DIR}/h6-made-{uuid.uuid4().hex}"
    holder = None
    try:
        first = enqueue("cost_shm_census", {}, dsn=dsn)
        wait_until(lambda: job_row(dsn, first)["state"] == "completed", timeout=60,
                   what="the child's first job")
        # Made after the child started, and held open here all along.
        with open(shared, "wb") as f:
            f.write(b"\0" * 4096)
        holder = _sleeper(shared)
        share = enqueue("cost_shm_share", {"path": shared, "make": made}, dsn=dsn)
        after = enqueue("cost_shm_census", {}, dsn=dsn)
        wait_until(lambda: job_row(dsn, after)["state"] == "completed", timeout=60,
                   what="the job after the share")
        assert job_row(dsn, share)["state"] == "completed", job_row(dsn, share)["errors"]
        assert os.path.exists(shared)
        assert not os.path.exists(made)
    finally:
        sup.stop()
        if holder is not None:
            holder.kill()
            holder.wait()
        for path in (shared, made):
            if os.path.exists(path):
                os.unlink(path)


@pytest.mark.slow
@needs_joblib
def test_a_child_killed_over_its_timeout_leaves_nothing_of_its_pools(dsn, tmp_path):
    report = tmp_path / "report"
    hung = enqueue("cost_joblib_hang", {"report": str(report)}, dsn=dsn)
    # The job writes its report once loky's workers are up (1-3 s on a loaded 2-vCPU
    # machine), then hangs until its timeout kills its child: 10 s leaves room for both.
    burst(dsn, "--timeout", "10")
    assert job_row(dsn, hung)["state"] == "discarded"
    pid, *seen = report.read_text().split()
    assert any(name.startswith("sem.loky-") for name in seen), seen
    assert _named_for({int(pid)}) == []


def test_status_warns_when_dev_shm_is_near_full(dsn, monkeypatch):
    from click.testing import CliRunner

    from shared import shmspace
    from supervisor.cli.main import main

    assert shmspace.shm_warning(near=1.01) is None
    line = shmspace.shm_warning(near=0.0)
    assert line is not None and line.startswith("warning: /dev/shm on this machine is ")
    assert shmspace.shm_warning("/no/such/dir", near=0.0) is None
    runner = CliRunner()
    quiet = runner.invoke(main, ["status", "--dsn", dsn])
    assert quiet.exit_code == 0, quiet.output
    assert "/dev/shm" not in quiet.output  # this machine's is far from full
    monkeypatch.setattr(shmspace, "NEAR_FULL", 0.0)
    loud = runner.invoke(main, ["status", "--dsn", dsn])
    assert loud.exit_code == 0, loud.output
    assert "warning: /dev/shm on this machine is " in loud.output


@pytest.mark.slow
@needs_joblib
def test_a_child_whose_supervisor_was_killed_clears_its_pools_entries(dsn, tmp_path):
    report = tmp_path / "report"
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", app="cost_handlers")
    try:
        enqueue("cost_joblib_hang", {"report": str(report)}, dsn=dsn)
        wait_until(report.exists, timeout=120, what="the job's report")
        pid, *seen = report.read_text().split()
        assert any(name.startswith("sem.loky-") for name in seen), seen
        sup.signal(signal.SIGKILL)
        sup.wait(30)
        wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30,
                   what="the orphaned child's death")
        assert _named_for({int(pid)}) == []
    finally:
        sup.stop()
