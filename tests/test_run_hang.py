"""A real supervisor against a private PostgreSQL that hangs: every server process
stopped (SIGSTOP), so connections are accepted by the kernel and nothing ever answers,
as with a pooler holding queries during a failover or a backend stuck in I/O.

``statement_timeout`` cannot help (the server enforces it) and keepalives are answered
by the server's kernel, so before the client-side deadline the parent blocked in a read:
``/healthz`` went unanswered, a SIGTERM waited for the database to come back, and after a
hang longer than the lease the supervisor rescued its own jobs and ran them twice.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.error
import urllib.request

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue_many
from shared.migrate import migrate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

DEADLINE = 2.0


def settings(tmp_path, **extra) -> str:
    """A config file: the deadline under test, the server's timeout below it."""
    values = {"database_deadline": DEADLINE, "statement_timeout": 1.0, **extra}
    path = tmp_path / "supervisor.toml"
    path.write_text("".join(f"{key} = {value}\n" for key, value in values.items()))
    return str(path)


def health(url: str, timeout: float) -> int | None:
    """The status /healthz answers within ``timeout`` s, None when it does not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        err.close()
        return err.code
    except (urllib.error.URLError, TimeoutError, OSError):
        return None


def healthz_url(sup: Supervisor) -> str:
    sup.wait_for_log("metrics on http://")
    port = re.search(r"metrics on http://[\d.]+:(\d+)/metrics", sup.err).group(1)
    return f"http://127.0.0.1:{port}/healthz"


def migrated(server) -> str:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        migrate(conn)
    return server.dsn


def test_healthz_answers_503_within_the_deadline_and_every_probe_is_answered(
        throwaway_server, tmp_path):
    dsn = migrated(throwaway_server)
    sup = Supervisor(dsn, "-n", "1", "--metrics-port", "0", "--poll-interval", "0.5",
                     "--config", settings(tmp_path))
    frozen: list[int] = []
    try:
        url = healthz_url(sup)
        wait_until(lambda: health(url, 5) == 200, what="healthy")
        frozen = throwaway_server.freeze()
        hung_at = time.monotonic()
        answers: list[tuple[float, int | None]] = []
        while time.monotonic() - hung_at < 3 * DEADLINE + 2:
            # A probe may wait for one deadline at most: the loop is never held longer.
            status = health(url, DEADLINE + 1)
            answers.append((time.monotonic() - hung_at, status))  # when it was answered
            time.sleep(0.2)
    finally:
        throwaway_server.thaw(frozen)
        sup.stop()
    unanswered = [at for at, status in answers if status is None]
    first_503 = next((at for at, status in answers if status == 503), None)
    assert not unanswered, f"/healthz went unanswered during the hang at {unanswered}"
    assert first_503 is not None and first_503 <= DEADLINE + 1, (
        f"first 503 {first_503} s into the hang; answers: {answers}")
    assert all(status == 503 for at, status in answers if at > DEADLINE + 1), answers
    print(f"first 503 {first_503:.2f} s into the hang (deadline {DEADLINE:g} s), "
          f"{len(answers)} probes answered")


def test_sigterm_during_a_hang_is_acted_on_at_once_and_the_drain_ends_within_grace(
        throwaway_server, tmp_path):
    dsn = migrated(throwaway_server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many("e2e_sleep", [{"seconds": 60.0}], conn=conn)
    log = tmp_path / "run.log"
    grace = 2.0
    sup = Supervisor(dsn, "-n", "1", "--grace", str(grace), "--poll-interval", "0.2",
                     "--config", settings(tmp_path), log_path=log)
    frozen: list[int] = []
    try:
        wait_until(lambda: any(r["event"] == "start" for r in read_log(log)),
                   what="the job running")
        frozen = throwaway_server.freeze()
        time.sleep(0.5)  # the poll (every 0.2 s) is now waiting for the hung server
        sup.signal(signal.SIGTERM)
        sent = time.monotonic()
        wait_until(lambda: "SIGTERM: draining" in sup.err, timeout=3 * DEADLINE,
                   interval=0.005, what="the drain to begin")
        acted_after = time.monotonic() - sent
        try:
            sup.proc.wait(timeout=grace + 10)
        except Exception:
            pass
        exited_after = time.monotonic() - sent
        still_running = sup.proc.poll() is None
    finally:
        throwaway_server.thaw(frozen)
        sup.stop()
    assert acted_after < 1.0, f"SIGTERM acted on {acted_after:.2f} s after it was sent"
    assert not still_running, "the supervisor was still running after the grace"
    assert exited_after <= grace + 2.0, f"exited {exited_after:.1f} s after SIGTERM"
    print(f"SIGTERM acted on after {acted_after * 1000:.0f} ms, exit after "
          f"{exited_after:.2f} s (grace {grace:g} s)")


def test_a_hang_longer_than_the_lease_runs_nothing_twice_and_fences_what_runs(
        throwaway_server, tmp_path):
    dsn = migrated(throwaway_server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        short = enqueue_many("hang_plain", [{"seconds": 0.6}] * 2, conn=conn, queue="plain")
        [long] = enqueue_many("hang_plain", [{"seconds": 30.0}], conn=conn, queue="plain")
    log = tmp_path / "run.log"
    lease = 4.0
    sup = Supervisor(dsn, "-n", "3", "--lease-ttl", str(lease), "--poll-interval", "0.2",
                     "--config", settings(tmp_path, maintenance_interval=0.5),
                     log_path=log, app="hang_handlers")
    frozen: list[int] = []
    try:
        wait_until(lambda: len({r["id"] for r in read_log(log) if r["event"] == "start"}) == 3,
                   what="three jobs running")
        frozen = throwaway_server.freeze()
        hung_at = time.monotonic()
        # The two short jobs end during the hang; their outcomes wait in memory.
        wait_until(lambda: len([r for r in read_log(log) if r["event"] == "end"]) == 2,
                   what="the short jobs to end during the hang")
        time.sleep(max(0.0, 2 * lease - (time.monotonic() - hung_at)))  # twice the lease
        throwaway_server.thaw(frozen)
        frozen = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            def rows():
                return {i: (state, attempt, errors) for i, state, attempt, errors in
                        conn.execute("SELECT id, state, attempt, errors FROM supervisor.jobs"
                                     " WHERE id = ANY(%s)", (short,)).fetchall()}
            wait_until(lambda: all(r[0] == "completed" for r in rows().values()),
                       timeout=30, what="the short jobs completed")
            short_rows = rows()
            records = read_log(log)
            for job_id in short:
                events = [r["event"] for r in records
                          if r["id"] == job_id and r["event"] != "beat"]
                assert events == ["start", "end"], f"job {job_id} ran {events}"
                assert short_rows[job_id][2] == [], f"job {job_id}: {short_rows[job_id][2]}"
            # The long job was interrupted before its lease ran out, so it runs again:
            # its interrupted attempt is not counted.
            wait_until(lambda: len([r for r in read_log(log)
                                    if r["event"] == "start" and r["id"] == long]) == 2,
                       timeout=30, what="the fenced long job to start again")
            long_attempt, long_errors = conn.execute(
                "SELECT attempt, errors FROM supervisor.jobs WHERE id = %s",
                (long,)).fetchone()
    finally:
        throwaway_server.thaw(frozen)
        sup.stop()
    records = read_log(log)
    long_runs = [r for r in records if r["id"] == long]
    first_run = [r for r in long_runs if r["pid"] == long_runs[0]["pid"]]
    assert all(r["event"] != "end" for r in first_run), "the long job was not interrupted"
    last_beat = max(r["t"] for r in first_run)
    second_start = min(r["t"] for r in long_runs if r["pid"] != long_runs[0]["pid"])
    assert second_start > last_beat, "the long job ran twice at once"
    assert long_attempt == 1, f"the interrupted attempt was counted: attempt {long_attempt}"
    assert [e["kind"] for e in long_errors] == ["shutdown"], long_errors
