"""Issue 47: what a burst tells the operator must be true. A burst after which jobs it
ran were discarded, or their dependents cancelled, exits ``CLI_JOBS_FAILED`` (3), not 0,
unless ``--discards-ok``; its closing summary counts every outcome by reason and equals
the table; and each failed attempt is one log line, said after its verdict (a crash
repeated as poison is never first announced as "will retry")."""

from __future__ import annotations

import re

import pytest
from e2e import Supervisor, run_burst, state_counts

from shared.enqueue import enqueue, enqueue_many
from shared.exitcodes import CLI_JOBS_FAILED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _burst(dsn: str, *args: str) -> tuple[int, str]:
    sup = Supervisor(dsn, "--burst", "-n", "2", "--poll-interval", "0.2", *args)
    try:
        code = sup.wait(90)
    finally:
        sup.stop()
    return code, sup.err


def test_a_burst_that_discarded_a_job_exits_3_and_says_so(dsn):
    enqueue("e2e_noop", dsn=dsn)
    enqueue("e2e_raise", dsn=dsn)  # two attempts, then discarded
    code, err = _burst(dsn)
    assert code == CLI_JOBS_FAILED, err
    assert "stopped (1 completed, 1 job discarded [1 error], 2 failed attempts)" in err
    assert "burst: 1 of the jobs it ran did not complete" in err
    assert state_counts(dsn) == {"completed": 1, "discarded": 1}


def test_discards_ok_exits_0_and_a_clean_burst_exits_0_without_it(dsn):
    enqueue("e2e_raise", dsn=dsn)
    code, err = _burst(dsn, "--discards-ok")
    assert code == 0, err
    assert "1 job discarded [1 error]" in err
    enqueue_many("e2e_noop", [{"n": i} for i in range(5)], dsn=dsn)
    sup = run_burst(dsn, "-n", "2", discards_ok=False)  # asserts exit 0
    # This run discarded nothing: the earlier run's discard is not counted here.
    assert "stopped (5 completed)" in sup.err, sup.err


def test_poison_and_the_dependent_it_cancelled_are_counted_and_logged_once(dsn):
    # Two timeouts in a row are the same crash: poison after 2 of its 3 attempts (in a
    # kind that counts timeouts as crashes: issue 45's rule, docs/admission.md).
    slow = enqueue("e2e_too_slow_counted", max_attempts=3, dsn=dsn)
    enqueue("e2e_noop", depends_on=[slow], dsn=dsn)
    enqueue_many("e2e_noop", [{"n": 1}, {"n": 2}], dsn=dsn)
    code, err = _burst(dsn)
    assert code == CLI_JOBS_FAILED, err
    assert ("stopped (2 completed, 1 job discarded [1 poison], 1 job cancelled "
            "[a dependency failed], 2 failed attempts)") in err, err
    # The summary equals the table.
    assert state_counts(dsn) == {"completed": 2, "discarded": 1, "cancelled": 1}
    # One line per decision, after it: attempt 1 retries, attempt 2 is poison.
    lines = [line for line in err.splitlines()
             if re.search(rf"job {slow} e2e_too_slow_counted attempt \d", line)]
    assert len(lines) == 2, lines
    assert "attempt 1/3 failed (timeout), will retry" in lines[0]
    assert "attempt 2/3 failed (timeout), discarded as poison" in lines[1]


def test_the_progress_line_names_a_wait_for_dependencies(dsn):
    first = enqueue("e2e_sleep", {"seconds": 6.0}, dsn=dsn)  # past the first 5 s line
    enqueue("e2e_noop", depends_on=[first], dsn=dsn)
    sup = run_burst(dsn, "-n", "1", discards_ok=False, timeout=90)
    lines = [line for line in sup.err.splitlines() if "supervisor.progress" in line]
    assert lines, sup.err
    assert "1 waiting for their dependencies" in lines[0], lines
    assert "run_at" not in lines[0] and "due in" not in lines[0], lines
    assert "stopped (2 completed)" in sup.err
