"""Stop signals during start-up are kept, not lost: recorded from the CLI's first lines
until the arbiter's SignalInbox takes them over. As PID 1 without an init (a container
without --init) a signal with no handler is dropped by the kernel, so this is the only
thing between a `docker stop` in the first fraction of a second and a hung container."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from e2e import ROOT, TESTS_DIR, wait_until

from supervisor.signals import DUPLICATE_WINDOW, SignalInbox, record_early, take_early

pytestmark = pytest.mark.timeout(90)


def _recorded() -> list[int]:
    """The signals recorded early and not taken yet, without taking them."""
    return [received.signum for received in take_early.__globals__["_early"]]


def test_inbox_takes_over_what_was_recorded_early():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGQUIT)}
    selector = selectors.DefaultSelector()
    inbox = SignalInbox((signal.SIGTERM, signal.SIGQUIT))
    try:
        record_early()
        os.kill(os.getpid(), signal.SIGTERM)
        wait_until(lambda: signal.SIGTERM in _recorded(), what="the early record")
        inbox.install(selector)
        assert selector.select(timeout=5), "the inbox was not woken"
        assert inbox.take() == [signal.SIGTERM]
        assert take_early() == []
    finally:
        inbox.uninstall()
        selector.close()
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_second_stop_signal_during_start_up_exits_at_once():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGQUIT)}
    try:
        record_early()
        os.kill(os.getpid(), signal.SIGTERM)
        wait_until(lambda: take_early.__globals__["_early"], what="the first record")
        # The same stop delivered twice (a wrapper and its process group) is one.
        os.kill(os.getpid(), signal.SIGTERM)
        assert _recorded() == [signal.SIGTERM]
        time.sleep(DUPLICATE_WINDOW)  # past the window: a second request
        with pytest.raises(SystemExit) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            wait_until(lambda: False, timeout=5, what="the second signal")
        assert info.value.code == 128 + signal.SIGTERM
    finally:
        take_early()
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _start(gate: Path, dsn: str, prefix: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]),
               EDGES_GATE=str(gate), SUPERVISOR_DSN=dsn)
    return subprocess.Popen([*prefix, sys.executable, "-m", "supervisor", "run", "--app",
                             "edges_handlers", "-n", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(TESTS_DIR))


def _finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"no exit {timeout} s after SIGTERM: the signal was lost\n{err}")
    return proc.returncode, err


@pytest.mark.slow
def test_sigterm_during_start_up_drains_and_exits_0(dsn):
    """Without the early handler the default action killed the process mid-start (-15);
    with it, the TERM is handled as a drain once the loop runs."""
    gate = Path(tempfile.mkdtemp(prefix="edges-gate-")) / "go"
    proc = _start(gate, dsn, [])
    wait_until(lambda: Path(f"{gate}.importing").exists(), timeout=30, what="app import")
    proc.send_signal(signal.SIGTERM)
    gate.touch()
    code, err = _finish(proc)
    assert code == 0, err
    assert "SIGTERM: draining" in err


def _namespace_init(unshare_pid: int) -> int:
    def child() -> int | None:
        try:
            text = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text()
        except FileNotFoundError:
            return None
        pids = [int(p) for p in text.split()]
        return pids[0] if pids else None
    return wait_until(child, timeout=10, what="the namespace's PID 1")


def _assert_pid_1(pid: int) -> None:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    nspid = next(line for line in lines if line.startswith("NSpid:")).split()
    assert nspid[-1] == "1", f"not PID 1 in its namespace: {nspid}"


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a PID namespace")
def test_as_pid_1_a_sigterm_during_start_up_is_not_lost(dsn):
    """`supervisor run` as PID 1 of a fresh PID namespace (as in a container without an
    init). A SIGTERM sent from outside while it is still importing must stop it."""
    gate = Path(tempfile.mkdtemp(prefix="edges-gate-")) / "go"
    proc = _start(gate, dsn, ["unshare", "--pid", "--fork", "--kill-child"])
    try:
        init = _namespace_init(proc.pid)
        _assert_pid_1(init)
        wait_until(lambda: Path(f"{gate}.importing").exists(), timeout=30, what="app import")
        os.kill(init, signal.SIGTERM)
        gate.touch()
        code, err = _finish(proc)
        assert code == 0, err
        assert "SIGTERM: draining" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a PID namespace")
def test_as_pid_1_orphans_are_reaped(dsn, conn):
    """A handler's process that outlives its parent is re-parented to PID 1: the
    supervisor; it must not stay a zombie."""
    from shared.enqueue import enqueue

    marker = Path(tempfile.mkdtemp(prefix="edges-orphan-")) / "exited"
    enqueue("edges_orphan", {"marker": str(marker)}, conn=conn)
    env_gate = Path(tempfile.mkdtemp(prefix="edges-gate-")) / "go"
    env_gate.touch()
    proc = _start(env_gate, dsn, ["unshare", "--pid", "--fork", "--kill-child"])
    try:
        init = _namespace_init(proc.pid)
        _assert_pid_1(init)
        wait_until(marker.exists, timeout=30, what="the orphan's exit")

        def zombies() -> list[int]:
            found = []
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                if fields[0] == "Z" and int(fields[1]) == init:
                    found.append(int(entry.name))
            return found

        wait_until(lambda: not zombies(), timeout=10, what="no zombie children of PID 1")
        os.kill(init, signal.SIGTERM)
        code, err = _finish(proc)
        assert code == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
