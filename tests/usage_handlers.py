"""Handlers for the per-attempt usage and output tests (issues 26 and 29), loaded with
``--app usage_handlers``. Each measures itself the way a user would, so a test can hold
the supervisor's figures against the handler's own."""

from __future__ import annotations

import os
import re
import resource
import signal
import sys
import time

from workers import job


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@job
def usage_spin(seconds: float = 0.2) -> dict:
    """Spin until ``seconds`` of CPU time passed; report the CPU and wall time seen."""
    cpu0, wall0 = _cpu(), time.monotonic()
    n = 0
    while _cpu() - cpu0 < seconds:
        for _ in range(10_000):
            n += 1
    return {"cpu": _cpu() - cpu0, "wall": time.monotonic() - wall0}


@job
def usage_alloc(megabytes: int = 300) -> dict:
    """Hold ``megabytes`` of touched memory; report the RSS with it held."""
    block = bytearray(b"\x01") * (megabytes << 20)  # written, so every page is resident
    rss = _rss_bytes()
    del block
    return {"rss": rss}


@job
def usage_print(total: int = 1 << 20) -> int:
    """Print ``total`` bytes in numbered 100-byte lines, then END."""
    line = 0
    written = 0
    while written < total:
        text = f"{line:08d} " + "x" * 90 + "\n"
        sys.stdout.write(text)
        written += len(text)
        line += 1
    sys.stdout.write("END\n")
    return line


@job
def usage_silent() -> None:
    """Print nothing."""


@job(max_attempts=2)
def usage_print_and_fail(attempt_note: str = "tried") -> None:
    """Print a line to each stream, then fail."""
    print(f"{attempt_note} <b>on stdout</b>")
    print("and on stderr", file=sys.stderr)
    raise ValueError("it printed, then failed")


@job
def usage_native_regex(n: int = 27) -> bool:
    """One regular expression that holds the GIL for seconds (catastrophic
    backtracking): the heartbeat thread starves, the CPU time moves."""
    return re.match(r"(a+)+$", "a" * n + "!") is not None


@job
def usage_subprocess_spin(seconds: float = 0.2) -> float:
    """Run a process that spins ``seconds`` of CPU and wait for it: its CPU time is the
    job's too."""
    import subprocess

    code = ("import resource\n"
            "def cpu():\n"
            "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
            "    return r.ru_utime + r.ru_stime\n"
            f"start = cpu()\nwhile cpu() - start < {seconds}: pass\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    return seconds


@job(max_attempts=1)
def usage_spin_forever() -> None:
    """Spin on the CPU until the parent kills it (its hard timeout)."""
    n = 0
    while True:
        n += 1


_grown: list[bytes] = []


@job(max_attempts=1)
def usage_grow(step_mb: int = 8, max_mb: int = 1500) -> int:
    """Take ``step_mb`` of touched memory at a time up to ``max_mb`` (the memory cap
    kills it on the way)."""
    got = 0
    while got < max_mb:
        _grown.append(b"\x01" * (step_mb << 20))  # written, so resident
        got += step_mb
        time.sleep(0.01)
    _grown.clear()
    return got


@job(max_attempts=1)
def usage_crash(seconds: float = 0.3, how: str = "segv") -> None:
    """Spin ``seconds`` of wall time, then die without answering: SIGSEGV or _exit."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    os._exit(3)
