"""Poison inputs: a job that crashes its child the same way twice in a row is discarded
at once (kind ``poison``, both crashes kept), not retried for its 20 attempts."""

from __future__ import annotations

import pytest
from e2e import Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_segfaulting_handler_is_discarded_as_poison_after_two_attempts(dsn, tmp_path):
    log = tmp_path / "run.log"
    poisoned = enqueue("adm_segv", {}, dsn=dsn)
    tolerated = enqueue("adm_segv_tolerated", {}, dsn=dsn)
    raising = enqueue("adm_raise", {}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", log_path=log, app="admission_handlers")
    try:
        wait_until(lambda: job_row(dsn, poisoned)["state"] == "discarded", timeout=60,
                   what="the poison job to be discarded")
        # The same crash with poison_after=0 keeps being retried past two attempts.
        wait_until(lambda: job_row(dsn, tolerated)["attempt"] >= 3, timeout=60,
                   what="the tolerated kind's third attempt")
        wait_until(lambda: job_row(dsn, raising)["state"] == "discarded", timeout=60,
                   what="the raising job to use its attempts")
    finally:
        sup.stop()
    row = job_row(dsn, poisoned)
    assert row["attempt"] == 2 and row["max_attempts"] == 20
    kinds = [e["kind"] for e in row["errors"]]
    assert kinds == ["crashed", "crashed", "poison"], row["errors"]
    assert all("SIGSEGV" in e["message"] for e in row["errors"][:2])
    assert row["errors"][0]["signature"] == row["errors"][1]["signature"]
    assert "poison" in row["errors"][2]["message"]
    # One line per decision, said after it: never "will retry" first for this attempt.
    assert (f"job {poisoned} adm_segv attempt 2/20 failed (crashed), discarded as poison"
            in sup.err)
    assert f"job {poisoned} adm_segv attempt 2/20 failed (crashed), will retry" not in sup.err
    assert f"job {poisoned} adm_segv attempt 1/20 failed (crashed), will retry" in sup.err
    starts = [r for r in read_log(log) if r["id"] == poisoned]
    assert len(starts) == 2
    # Ordinary exceptions are not crashes: all three attempts ran, no poison entry.
    kinds = [e["kind"] for e in job_row(dsn, raising)["errors"]]
    assert kinds == ["error", "error", "error"]
    assert "poison" not in [e["kind"] for e in job_row(dsn, tolerated)["errors"]]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_poison_after_must_be_a_whole_number_of_at_least_zero(bad):
    from workers import job

    with pytest.raises(ValueError, match="poison_after"):
        job(name=f"adm_bad_poison_{bad!r}", poison_after=bad)(lambda: None)
