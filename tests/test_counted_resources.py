"""Counted resources (issue 45): ``@job(resources={"gpu": 1})`` against ``supervisor run
--resources gpu=N``. Admission counts them like CPUs; a GPU job's child sees exactly the
devices it holds in CUDA_VISIBLE_DEVICES; a job needing what this supervisor has none
of goes back once and later claims skip it; bad input is one line."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import pytest
from e2e import ROOT, TESTS_DIR, Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _runs(log) -> dict[int, dict]:
    """Each GPU job's start and end, by the handlers' own clocks."""
    runs: dict[int, dict] = {}
    for r in read_log(log):
        if r["kind"] == "res_gpu":
            runs.setdefault(r["id"], {})[r["event"]] = r
    return runs


def test_two_gpu_jobs_on_one_gpu_never_overlap_and_each_sees_one_device(dsn, tmp_path):
    log = tmp_path / "run.log"
    ids = [enqueue("res_gpu", {"seconds": 0.5}, dsn=dsn) for _ in range(4)]
    sup = Supervisor(dsn, "-n", "2", "--resources", "gpu=1", log_path=log,
                     app="discard_handlers")
    try:
        wait_until(lambda: all(job_row(dsn, i)["state"] == "completed" for i in ids),
                   timeout=120, what="the GPU jobs")
    finally:
        sup.stop()
    runs = _runs(log)
    assert set(runs) == set(ids)
    for run in runs.values():
        assert run["start"]["cuda"] == "0"
        assert run["start"]["devices"] == {"gpu": [0]}
    spans = sorted((r["start"]["t"], r["end"]["t"]) for r in runs.values())
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans  # one GPU: the next starts after the last ended


def test_two_gpus_run_two_jobs_at_once_on_different_devices(dsn, tmp_path):
    log = tmp_path / "run.log"
    ids = [enqueue("res_gpu", {"seconds": 0.1, "meet": 2}, dsn=dsn) for _ in range(2)]
    sup = Supervisor(dsn, "-n", "2", "--resources", "gpu=2", log_path=log,
                     app="discard_handlers",
                     env={"CUDA_VISIBLE_DEVICES": "parent-value"})
    try:
        wait_until(lambda: all(job_row(dsn, i)["state"] == "completed" for i in ids),
                   timeout=120, what="the GPU jobs")
        later = enqueue("res_env", {"name": "CUDA_VISIBLE_DEVICES"}, dsn=dsn)
        wait_until(lambda: job_row(dsn, later)["state"] == "completed", timeout=60,
                   what="a job that holds no GPU")
    finally:
        sup.stop()
    runs = _runs(log)
    assert all(run["met"]["met"] for run in runs.values())  # both ran at once
    assert sorted(run["start"]["cuda"] for run in runs.values()) == ["0", "1"]
    # After a GPU job, its child's own value is back for a job that holds none.
    assert job_row(dsn, later)["result"] == "parent-value"


def test_what_this_supervisor_lacks_is_left_alone_after_one_look(dsn, tmp_path):
    log = tmp_path / "run.log"
    gpu = enqueue("res_gpu", {}, dsn=dsn)  # its handler needs a GPU
    # A kind without one, enqueued with a licence this supervisor has none of.
    licensed = enqueue("res_env", {"name": "X"}, resources={"licence": 1}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--poll-interval", "0.2", log_path=log,
                     app="discard_handlers")
    try:
        sup.wait_for_log("kind res_gpu needs gpu=1, this supervisor has no gpu", timeout=60)
        sup.wait_for_log(f"job {licensed} res_env needs licence=1, this supervisor has no "
                         "licence", timeout=60)
        # Other work runs meanwhile, and every later claim (some 40 polls) skips both.
        others = [enqueue("dis_ok", {}, dsn=dsn) for _ in range(5)]
        wait_until(lambda: all(job_row(dsn, i)["state"] == "completed" for i in others),
                   timeout=60, what="the other jobs")
        # Not a wait for anything: the window (with the minute above, about 10 s of
        # 0.2 s polls) in which a repeated claim or log line would show.
        time.sleep(8)
    finally:
        sup.stop()
    assert sup.err.count("kind res_gpu needs gpu=1") == 1
    assert sup.err.count(f"job {licensed} res_env needs licence=1") == 1
    for job_id in (gpu, licensed):
        row = job_row(dsn, job_id)
        assert row["state"] == "available" and row["attempt"] == 0
        assert not [r for r in read_log(log) if r["id"] == job_id]


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SUPERVISOR_DSN=dsn, PYTHONPATH=f"{TESTS_DIR}:{ROOT}")
    return subprocess.run([sys.executable, "-m", "supervisor", *args], env=env,
                          capture_output=True, text=True, timeout=60, cwd=str(TESTS_DIR))


@pytest.mark.parametrize(("args", "says"), [
    (("run", "--app", "discard_handlers", "--resources", "gpu=-1"), "gpu=-1"),
    (("run", "--app", "discard_handlers", "--resources", "gpu=x"), "gpu=x"),
    (("run", "--app", "discard_handlers", "--resources", "GPU=1"), "'GPU'"),
    (("enqueue", "res_gpu", "--resources", "gpu=0"), "gpu=0"),
    (("enqueue", "res_gpu", "--resources", "gpu"), "'gpu'"),
])
def test_bad_resources_are_one_line_and_a_nonzero_exit(dsn, args, says):
    done = _cli(dsn, *args)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("bad", [{"gpu": 0}, {"gpu": -1}, {"gpu": "1"}, {"GPU": 1}, ["gpu"]])
def test_a_handler_declaring_bad_resources_is_refused_at_import(bad):
    from workers import job

    with pytest.raises(ValueError, match="resources"):
        job(name=f"res_bad_{bad!r}", resources=bad)(lambda: None)


def test_status_and_the_dashboard_show_what_is_held_and_what_waits(conn):
    from test_admission_status import beat

    from supervisor import admin
    from supervisor.cli.status import render_text
    from supervisor.dashboard.render import ENV

    conn.execute("""INSERT INTO supervisor.jobs (kind, resources) VALUES ('k', '{"gpu": 1}'),
                    ('k', '{"licence": 1}'), ('k', '{"gpu": 3}')""")
    for sup_id, held in (("a", 1), ("b", 2)):
        beat(conn, sup_id, 4, {"cpus": 4, "memory": None, "source": "none",
                               "resources": {"gpu": {"total": 2, "held": held}},
                               "waiting": 1, "why": ["needs gpu=1, 0 free of 2"],
                               "too_big": []})
    snapshot = admin.status(conn)
    waiting = snapshot["waiting_for_resources"]
    assert waiting["held"] == {"gpu": {"held": 3, "total": 4}}
    # Held back by a supervisor (2), beyond every supervisor (licence, gpu=3 of 2 each).
    assert waiting["count"] == 4
    assert waiting["why"] == ["needs gpu=1, 0 free of 2",
                              "needs gpu=3, at most gpu=2 on a supervisor",
                              "needs licence=1, no supervisor has licence"]
    text = render_text(snapshot)
    assert "resources held: gpu 3/4" in text
    assert "needs licence=1, no supervisor has licence" in text
    html = ENV.get_template("queues.html").render(
        nav=[], path="/", read_only=True, refresh=0, notice=None, states=admin.COUNTED,
        hour_chart="", **(snapshot | {"totals": dict.fromkeys(admin.COUNTED, 0),
                                      "finished_age": 0}))
    assert "Resources held: gpu 3/4" in html
