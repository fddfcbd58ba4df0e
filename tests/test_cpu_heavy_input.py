"""Bad input of the CPU-heavy settings (issue 26) is refused with one clear line:
a per-kind heartbeat_timeout, native_threads, hooks."""

from __future__ import annotations

import pytest

from workers import job


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), "3", True])
def test_a_kinds_heartbeat_timeout_must_be_positive_seconds(value):
    with pytest.raises(ValueError, match="heartbeat_timeout must be a number of seconds > 0"):
        job(heartbeat_timeout=value, name="bad_beat_2")


def test_a_kinds_heartbeat_timeout_is_kept():
    handle = job(heartbeat_timeout=7, name="input_beat_7")(lambda: None)
    assert handle.defaults.heartbeat_timeout == 7.0


def test_a_kinds_heartbeat_timeout_under_the_interval_is_refused_at_start(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "shortbeat.py").write_text(
        "from workers import job\n\n@job(heartbeat_timeout=1)\ndef short() -> None: ...\n")
    done = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "shortbeat"],
                          capture_output=True, text=True, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "supervisor: error: job kind 'short': heartbeat_timeout 1 s must be longer than "
        "heartbeat_interval (2 s)"]
