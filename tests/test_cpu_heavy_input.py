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
