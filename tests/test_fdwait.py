"""``shared.fdwait.readable``: a readable fd ends the wait at once, an idle one lets the
time run out, a closed one counts as readable, and all of it past fd 1,024, where
``select`` raised ``ValueError``."""

from __future__ import annotations

import os
import resource
import time

import pytest

from shared.fdwait import readable


@pytest.fixture
def high_pipe():
    """A pipe whose read end is fd 1,050 (the fd limit raised for it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the fd limit ({hard}) leaves no fd past 1,024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    read_fd, write_fd = os.pipe()
    high = os.dup2(read_fd, 1050)
    os.close(read_fd)
    yield high, write_fd
    for fd in (high, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass  # the test closed it
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_readable_fd_past_1024_ends_the_wait_at_once(high_pipe):
    high, write_fd = high_pipe
    os.write(write_fd, b"x")
    began = time.monotonic()
    assert readable([high], 5.0)
    assert time.monotonic() - began < 1.0  # not the 5 s


def test_an_idle_fd_lets_the_time_run_out_and_a_look_does_not_wait(high_pipe):
    high, _ = high_pipe
    began = time.monotonic()
    assert not readable([high], 0.05)
    assert time.monotonic() - began >= 0.04
    assert not readable([high], 0)


def test_a_closed_writer_counts_as_readable(high_pipe):
    high, write_fd = high_pipe
    os.close(write_fd)
    assert readable([high], 5.0)
