"""Issue 47: one stop delivered twice is one drain. ``kill -TERM`` sent to a ``timeout``
wrapper reaches the supervisor twice (timeout signals its child, then its process
group), and a supervisor sent two SIGTERMs 50 ms apart gets the same: both drain, the
two running jobs finish where they run, nothing is killed and rerun. SIGQUIT still
stops at once. (``scripts/stop_signal_tries.py`` runs 10 tries of each.)"""

from __future__ import annotations

import shutil

import pytest
from operator_truth_stops import TWICE, WRAPPED, stop_twice

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TRIES = 3


@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")
def test_term_sent_to_a_timeout_wrapper_drains(dsn, tmp_path):
    for n in range(TRIES):
        result = stop_twice(dsn, WRAPPED, tmp_path)
        assert result.drained, f"try {n}:\n{result.err}"
        assert result.completed == 2 and result.exit_code == 0, result.err


def test_two_sigterms_50_ms_apart_drain(dsn, tmp_path):
    for n in range(TRIES):
        result = stop_twice(dsn, TWICE, tmp_path, gap=0.05)
        assert result.drained, f"try {n}:\n{result.err}"
        assert "SIGTERM" in result.err and "the same stop, still draining" in result.err
        assert result.completed == 2 and result.exit_code == 0, result.err


def test_sigquit_after_the_duplicate_still_stops_now(dsn, tmp_path):
    result = stop_twice(dsn, TWICE, tmp_path, gap=0.05, then_quit=True)
    assert "stopping now" in result.err and "SIGQUIT" in result.err
    assert result.completed == 0  # killed, put back: not completed where they ran
