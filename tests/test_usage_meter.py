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



_JOBS = r"""
import os, resource, sys, time
if sys.argv[1] == "exec-after-peak":
    # The kernel keeps the mark of the image an exec replaced as ru_maxrss's floor, as
    # it keeps an exited thread's on some kernels: a mark no reset lowers.
    block = bytearray(300 << 20)
    block[::4096] = b"x" * len(block[::4096])  # resident, not just mapped
    del block
    os.execv(sys.executable, [sys.executable, __file__, "jobs"])
if sys.argv[1] == "fork":
    pid = os.fork()  # as the pool forks its children
    if pid:
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
from workers.usage import UsageMeter

reads = []
real_read = UsageMeter._read_hwm
def counted(self):
    reads.append(1)
    return real_read(self)
UsageMeter._read_hwm = counted

meter = UsageMeter(print)
peaks = []
for seconds in (0.02, 0.02, 0.02, 0.0005, 0.0005):  # jobs as long as a frame, and shorter
    meter.start(); time.sleep(seconds); peaks.append(meter.stop().max_rss_bytes)
print(len(reads), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, *peaks,
      flush=True)
"""


def _jobs(mode: str, tmp_path) -> tuple[int, int, list[int]]:
    import subprocess
    import sys

    script = tmp_path / "meter_jobs.py"
    script.write_text(_JOBS)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, str(script), mode], check=True,
                         capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": root}).stdout
    reads, process_peak, *peaks = (int(x) for x in out.split())
    return reads, process_peak, peaks


def test_a_forked_child_reads_its_jobs_peaks_without_proc_self_status(tmp_path):
    """Each job's peak comes from ``ru_maxrss`` after the reset, checked against
    ``statm``: no ``/proc/self/status`` read (0.08-0.1 ms a job on a 2-vCPU VM)."""
    reads, _, peaks = _jobs("fork", tmp_path)
    assert reads == 0
    assert all(0 < peak < 200 << 20 for peak in peaks), peaks


def test_a_mark_no_reset_lowers_is_not_charged_to_any_job(tmp_path):
    """``ru_maxrss`` never reads below a mark the process kept from before (an exec's,
    or an exited thread's on kernels that keep it); the jobs, short ones too, read
    their own peak from ``VmHWM`` then."""
    reads, process_peak, peaks = _jobs("exec-after-peak", tmp_path)
    assert process_peak >= 300 << 20  # the kept mark: ru_maxrss alone would say this
    assert all(0 < peak < 200 << 20 for peak in peaks), peaks
    assert reads == len(peaks)
