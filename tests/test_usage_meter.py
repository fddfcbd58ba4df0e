"""The child's usage meter (workers.usage) on its own: what it measures, and a /proc it
cannot use costs one warning and falls back to getrusage's peak, never a crash."""

from __future__ import annotations

import os
import resource

import orjson

from shared.usage import Usage
from workers import usage as usage_module
from workers.usage import UsageMeter


def spin(seconds: float) -> None:
    start = resource.getrusage(resource.RUSAGE_SELF)
    while True:
        now = resource.getrusage(resource.RUSAGE_SELF)
        if (now.ru_utime + now.ru_stime) - (start.ru_utime + start.ru_stime) >= seconds:
            return


def test_it_measures_cpu_and_wall_of_a_job():
    warnings: list[str] = []
    meter = UsageMeter(warnings.append)
    meter.start()
    spin(0.05)
    usage = meter.stop()
    assert usage is meter.usage and isinstance(usage, Usage)
    assert usage.cpu_seconds >= 0.045 and usage.wall_seconds >= usage.cpu_seconds * 0.9
    assert usage.max_rss_bytes > 1 << 20
    assert warnings == []


def test_an_unreadable_proc_warns_once_and_falls_back_to_getrusage(monkeypatch):
    real_open = os.open

    def refuse_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/self/"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(usage_module.os, "open", refuse_proc)
    warnings: list[str] = []
    meter = UsageMeter(warnings.append)
    for _ in range(3):
        meter.start()
        spin(0.01)
        usage = meter.stop()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        assert usage.max_rss_bytes == peak and usage.cpu_seconds >= 0.009
    assert len(warnings) == 1
    assert "/proc/self/clear_refs" in warnings[0] and "getrusage" in warnings[0]


def test_stored_usage_reads_back_and_anything_else_is_no_usage():
    usage = Usage(0.25, 0.5, 123)
    assert Usage.from_json(orjson.loads(usage.to_json())) == usage
    assert Usage.from_json({"cpu_seconds": "x"}) is None and Usage.from_json([1]) is None


def test_a_process_the_job_ran_and_reaped_counts_in_its_peak_memory():
    import subprocess
    import sys

    # The kernel keeps the largest peak of any process reaped so far (this test process
    # may have reaped big ones before): the job's must pass it to show.
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    size = max(150 << 20, reaped + (64 << 20))
    meter = UsageMeter(lambda why: None)
    meter.start()
    subprocess.run([sys.executable, "-c", f"b = b'\\x01' * {size}"], check=True)
    usage = meter.stop()
    assert usage.max_rss_bytes >= size  # the subprocess's, not the meter's own
    meter.start()
    spin(0.01)
    after = meter.stop().max_rss_bytes
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert after < size or own >= size  # the next job is not charged for it
