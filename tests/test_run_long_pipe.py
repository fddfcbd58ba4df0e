"""Jobs of 0.1-1 s wait one behind the running one in a child's pipe (issue 43), so a
drain meets a queued job in every pipe. With real numpy jobs of 0.2 s and the stop
delivered twice (a wrapper's SIGTERM, then the same stop again within the duplicate
window): every job that started ran once and is completed, every one that did not is
back in the queue with its attempt unspent, and none is lost. The queue's pipe is read
back from ``status --explain`` so the test knows it ran with a pipe of two. At 0.12 s
the completions also wait for the next claim rather than ride one of their own
(``Claimer._claim_soon``): those waiting when the stop comes are written all the same."""

import signal

import orjson
import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue_many
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # real supervisors: CI lane

JOBS = 40


@pytest.mark.parametrize("seconds", [0.2, 0.12])
def test_a_drain_with_a_queued_job_in_every_pipe_runs_none_twice(dsn, tmp_path, seconds):
    log, config = tmp_path / "runs.log", tmp_path / "supervisor.toml"
    config.write_text("maintenance_interval = 0.5\n")  # a heartbeat every half second
    ids = enqueue_many("pipe_matmul", [{"seconds": seconds}] * JOBS, queue="long_pipe",
                       dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "-q", "long_pipe", "--grace", "30",
                     "--config", str(config), log_path=log,
                     app="long_pipe_handlers")
    try:
        wait_until(lambda: sum(r["event"] == "end" for r in read_log(log)) >= 8,
                   timeout=60, what="eight jobs done")
        pipe = {}

        def explained() -> bool:
            out = CliRunner().invoke(main, ["status", "--explain", "--json", "--dsn", dsn])
            if out.exit_code != 0:
                return False
            sups = orjson.loads(out.output)["explain"]
            if len(sups) != 1 or "long_pipe" not in sups[0]["queues"]:
                return False
            pipe.update(sups[0]["queues"]["long_pipe"]["pipe"])
            return pipe.get("rule") == "long_job_pipe"

        wait_until(explained, timeout=20, what="the queue's pipe of two")
        assert pipe["value"] == 2
        sup.signal(signal.SIGTERM)
        sup.signal(signal.SIGTERM)  # the same stop again, as a wrapper forwards it
        assert sup.wait(40) == 0
    finally:
        sup.stop()
    events = read_log(log)
    starts = [r["id"] for r in events if r["event"] == "start"]
    ends = [r["id"] for r in events if r["event"] == "end"]
    assert len(starts) == len(set(starts)), "a job ran twice"
    assert sorted(starts) == sorted(ends)  # every started job finished in the grace
    rows = {i: job_row(dsn, i) for i in ids}
    assert {i for i, r in rows.items() if r["state"] == "completed"} == set(starts)
    waiting = [r for i, r in rows.items() if i not in set(starts)]
    assert waiting, "the drain came after every job ran: nothing was tested"
    for row in waiting:
        assert row["state"] == "available"
        assert row["attempt"] == 0 and row["errors"] == [] and row["lease_owner"] is None
