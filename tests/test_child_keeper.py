"""What a child scope adopts (``workers.childscope.ChildKeeper``), in this process with
real processes and pools: processes started in the scope, the workers of pools created
in it (started later), nothing from outside it, and no pid reused by another process.
The end-to-end behaviour (the reaper sparing them, their end with the child) is in
``test_child_scope.py``."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ProcessPoolExecutor

import pytest

from shared.procfs import children, start_time
from workers.childscope import ChildKeeper, pool_workers


def _pid(_x: int) -> int:
    return os.getpid()


@pytest.fixture
def sleepers():
    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "300"])
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_process_started_in_the_scope_is_kept_and_one_outside_is_not(sleepers):
    keeper = ChildKeeper()
    before = sleepers()
    assert not keeper.holds()
    with keeper.scope():
        inside = sleepers()
    after = sleepers()
    assert keeper.holds()
    kids = children(os.getpid())
    assert {before.pid, inside.pid, after.pid} <= set(kids)
    assert keeper.spare(kids) == {inside.pid}


def test_a_kept_pid_whose_process_is_gone_is_forgotten(sleepers, monkeypatch):
    keeper = ChildKeeper()
    with keeper.scope():
        kept = sleepers()
    real = start_time(kept.pid)
    # Another process with the same pid would have started at another time.
    monkeypatch.setattr("workers.childscope.start_time", lambda pid: (real or 0) + 1)
    assert keeper.spare(children(os.getpid())) == set()
    monkeypatch.undo()
    assert keeper.spare(children(os.getpid())) == set()  # forgotten for good
    assert not keeper.holds()


def test_the_workers_a_pool_from_the_scope_starts_later_are_kept():
    keeper = ChildKeeper()
    outside = ProcessPoolExecutor(max_workers=1)
    try:
        with keeper.scope():
            pool = ProcessPoolExecutor(max_workers=2)  # no worker yet
        assert keeper.holds()
        try:
            assert set(pool.map(_pid, range(8)))  # its workers start now, "in a job"
            assert set(outside.map(_pid, range(2)))
            workers = pool_workers(pool)
            assert len(workers) == 2
            spared = keeper.spare(children(os.getpid()))
            assert workers <= spared
            assert not pool_workers(outside) & spared
        finally:
            pool.shutdown()
    finally:
        outside.shutdown()
    assert not pool_workers(pool)  # shut down: nothing left to keep


def test_a_pool_the_program_dropped_keeps_nothing():
    keeper = ChildKeeper()
    with keeper.scope():
        pool = ProcessPoolExecutor(max_workers=1)
    assert keeper.holds()
    pool.shutdown()
    del pool
    assert not keeper.holds()


def test_a_grandchild_started_in_the_scope_stays_kept_once_re_parented():
    keeper = ChildKeeper()
    with keeper.scope():
        shell = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"],
                                 stdout=subprocess.PIPE, text=True)
        assert shell.stdout is not None
        grandchild = int(shell.stdout.readline())
    try:
        # In a child (a subreaper) the grandchild becomes a child when the shell exits.
        assert keeper.spare([shell.pid, grandchild]) == {shell.pid, grandchild}
    finally:
        os.kill(grandchild, 9)
        shell.wait()
