"""Jobs in every state, written straight into the contract tables, for the dashboard's
tests and its screenshots (scripts/dashboard_screenshots.py); and a dashboard process
to look at them through.

``seed(conn)`` returns the ids it made by name. ``DashboardProcess`` runs the real
``supervisor dashboard`` command on a free port and reads its address from the line it
prints at start.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import psycopg
from psycopg.types.json import Jsonb

TOKEN = "operator-token-7f3a"
PROXIED_HOST = "dash.example.com"  # as a reverse proxy would pass it on
XSS = '<script>document.title="pwned"</script><img src=x onerror="document.title=1">'

_TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/workers/child.py", line 212, in run_one
    result = handler(**args)
  File "/srv/app/images.py", line 41, in resize
    raise ValueError(f"cannot open {path!r}")
ValueError: cannot open 'missing.png'"""


def _error(attempt: int, kind: str, message: str, traceback: str | None,
           minutes_ago: int) -> dict:
    return {"attempt": attempt, "kind": kind, "message": message, "traceback": traceback,
            "at": (datetime.now(UTC) - timedelta(minutes=minutes_ago)).isoformat(),
            "supervisor": "build-7:4242:3f9c"}


_INSERT = """
INSERT INTO supervisor.jobs (kind, queue, args, state, priority, attempt, max_attempts,
    run_at, created_at, attempted_at, finished_at, heartbeat_at, lease_owner,
    lease_expires_at, progress, errors, result)
VALUES (%(kind)s, %(queue)s, %(args)s, %(state)s, %(priority)s, %(attempt)s, %(max)s,
    now() + %(run_in)s * interval '1 second', now() - %(age)s * interval '1 second',
    CASE WHEN %(attempt)s > 0 THEN now() - %(started)s * interval '1 second' END,
    CASE WHEN %(state)s IN ('completed', 'discarded', 'cancelled')
         THEN now() - %(finished)s * interval '1 second' END,
    CASE WHEN %(state)s = 'running' THEN now() END,
    CASE WHEN %(state)s = 'running' THEN 'build-7:4242:3f9c' END,
    CASE WHEN %(state)s = 'running' THEN now() + interval '30 seconds' END,
    %(progress)s, %(errors)s, %(result)s)
RETURNING id
"""


def _job(conn: psycopg.Connection, kind: str, queue: str, state: str, *, args=None,
         attempt=0, max_attempts=5, priority=0, run_in=0.0, age=600.0, started=30.0,
         finished=5.0, progress=None, errors=(), result=None) -> int:
    def js(value):
        return None if value is None else orjson.dumps(value).decode()

    row = conn.execute(_INSERT, {
        "kind": kind, "queue": queue, "args": js(args or {}), "state": state,
        "priority": priority, "attempt": attempt, "max": max_attempts, "run_in": run_in,
        "age": age, "started": started, "finished": finished, "progress": js(progress),
        "errors": js(list(errors)), "result": js(result)}).fetchone()
    return row[0]


def seed(conn: psycopg.Connection) -> dict[str, int]:
    """Fill an empty migrated database with jobs in every state over four queues (one
    paused), and one live supervisor. Returns job ids by name."""
    ids: dict[str, int] = {}
    for n in range(6):
        ids[f"available{n}"] = _job(conn, "resize", "images", "available",
                                    args={"path": f"photos/{n:03d}.png", "width": 640},
                                    age=900 - n * 60, run_in=-(900 - n * 60))
    ids["scheduled"] = _job(conn, "nightly_report", "reports", "scheduled",
                            args={"day": "2026-11-30"}, run_in=3600)
    ids["running"] = _job(conn, "resize", "images", "running", attempt=1,
                          args={"path": "photos/big.tiff", "width": 4096},
                          progress={"done": 7, "total": 10, "message": "tile 7 of 10"})
    ids["running2"] = _job(conn, "render_tile", "images", "running", attempt=1,
                           args={"x": 3, "y": 5}, progress={"done": 2, "total": 8})
    for n in range(4):
        ids[f"completed{n}"] = _job(conn, "send_welcome", "email", "completed", attempt=1,
                                    args={"user_id": 1000 + n},
                                    result={"sent": True, "message_id": f"m-{n}"},
                                    finished=5 + n * 7)
    ids["completed_report"] = _job(conn, "nightly_report", "reports", "completed",
                                   attempt=1, result={"rows": 18234, "path": "r/1129.csv"})
    ids["retryable"] = _job(conn, "resize", "images", "retryable", attempt=2, run_in=40,
                            args={"path": "missing.png", "width": 64},
                            errors=[_error(1, "error", "ValueError: cannot open 'missing.png'",
                                           _TRACEBACK, 3),
                                    _error(2, "timeout", "ran past its timeout of 120s",
                                           None, 1)])
    ids["discarded"] = _job(conn, "send_welcome", "email", "discarded", attempt=5,
                            args={"user_id": 7, "note": XSS},
                            errors=[_error(a, "error", f"SMTPError: relay refused {XSS}",
                                           f"Traceback (most recent call last):\n  "
                                           f"File \"mail.py\", line 9, in send\n"
                                           f"SMTPError: {XSS}", 10 - a)
                                    for a in range(1, 6)])
    ids["discarded_binding"] = _job(conn, "render_tile", "images", "discarded", attempt=1,
                                    args={"x": 1},
                                    errors=[_error(1, "binding",
                                                   "render_tile() missing 1 required "
                                                   "argument: 'y'", None, 2)])
    ids["cancelled"] = _job(conn, "render_tile", "images", "cancelled", attempt=1,
                            args={"x": 9, "y": 9},
                            errors=[_error(1, "cancelled", "cancelled by operator", None, 4)])
    conn.execute("INSERT INTO supervisor.queues (name, paused) VALUES ('email', true)")
    # Its children as its heartbeat publishes them (supervisor.pool.ChildReport).
    children = [_child(1, 4251, ids["running"], "resize", 734.2, 412_000_000, 118),
                _child(2, 4252, ids["running2"], "render_tile", 12.8, 96_500_000, 402),
                _child(3, 4253, None, None, None, 61_200_000, 77),
                _child(4, 4254, None, None, None, 60_900_000, 80)]
    conn.execute("""INSERT INTO supervisor.supervisors
                        (id, host, pid, started_at, queues, children, busy, info)
                    VALUES ('build-7:4242:3f9c', 'build-7', 4242,
                            now() - interval '3 hours 12 minutes',
                            '{images,reports,email}', 4, 2, %s)""",
                 (Jsonb({"children": children}),))
    return ids


def _child(worker: int, pid: int, job_id: int | None, kind: str | None,
           seconds: float | None, rss: int, done: int) -> dict:
    return {"worker": worker, "pid": pid, "state": "busy" if job_id else "idle",
            "job_id": job_id, "kind": kind, "queue": "images" if job_id else None,
            "attempt": 1 if job_id else None, "job_seconds": seconds,
            "held": 1 if job_id else 0, "rss_bytes": rss, "jobs_done": done,
            "age_seconds": 3 * 3600.0 + worker}


def seed_pages(conn: psycopg.Connection) -> dict[str, int]:
    """On top of ``seed``: two schedules (one paused), a batch of ten exports half done
    with a callback, and global limits on the exports queue with the seeded
    supervisor's slice. Returns the new ids by name."""
    conn.execute("""INSERT INTO supervisor.schedules (name, kind, queue, every, paused)
                    VALUES ('heartbeat-ping', 'ping', 'reports', 60, false)""")
    conn.execute("""INSERT INTO supervisor.schedules (name, kind, queue, cron, paused,
                        last_fired_at, last_slot)
                    VALUES ('nightly-report', 'nightly_report', 'reports', '0 2 * * *',
                            true, now() - interval '22 hours', now() - interval '22 hours')""")
    batch = conn.execute("""INSERT INTO supervisor.batches
                                (total, callback_kind, callback_queue, callback_args)
                            VALUES (10, 'export_done', 'exports', '{}') RETURNING id"""
                         ).fetchone()[0]
    ids = {"batch": batch}
    for n in range(10):
        state = "completed" if n < 5 else "running" if n < 7 else "available"
        job = _job(conn, "export_part", "exports", state, attempt=1 if n < 7 else 0,
                   args={"part": n}, started=40 - n, finished=38 - n - 2 * (n % 2))
        conn.execute("UPDATE supervisor.jobs SET batch_id = %s WHERE id = %s", (batch, job))
    conn.execute("""INSERT INTO supervisor.queue_limits (queue, max_running, max_rate, burst)
                    VALUES ('exports', 4, 2.0, 5)""")
    conn.execute("""INSERT INTO supervisor.limit_leases
                        (queue, owner, slots, want_slots, rate, want_rate, expires_at)
                    VALUES ('exports', 'build-7:4242:3f9c', 2, 3, 1.0, 2.0,
                            now() + interval '1 hour')""")
    return ids


class DashboardProcess:
    """``supervisor dashboard --port 0`` over ``dsn`` in a child process, with
    ``token`` in its environment (None: read-only). ``url`` is where it listens."""

    def __init__(self, dsn: str, token: str | None, *, refresh: float = 1.0,
                 extra_args: tuple[str, ...] = ()) -> None:
        env = {k: v for k, v in os.environ.items() if k != "SUPERVISOR_DASHBOARD_TOKEN"}
        if token is not None:
            env["SUPERVISOR_DASHBOARD_TOKEN"] = token
        cmd = [sys.executable, "-m", "supervisor", "dashboard", "--port", "0", "--dsn", dsn,
               "--refresh", str(refresh), *extra_args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).resolve().parent.parent)
        # The address is said once it serves, after uvicorn's own start-up lines and
        # any warning about the host or the token.
        seen: list[str] = []
        match = None
        while match is None and len(seen) < 20:
            line = self.proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            match = re.search(r"dashboard on (http://\S+/)", line)
        if match is None:
            rest = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.close()
            raise RuntimeError(f"dashboard did not start: {''.join(seen)}{rest}")
        self.url = match.group(1).rstrip("/")
        # Keep reading its log so a chatty server never blocks on a full pipe.
        self.log: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self._wait_ready()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)

    def _wait_ready(self, timeout: float = 20.0) -> None:
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/api/queues", timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # it answers (401: a dashboard whose reads need a token)
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("dashboard did not answer") from None
                time.sleep(0.05)  # polling a condition (the port answers) with a deadline

    def close(self) -> None:
        """Stop the process (SIGTERM: uvicorn shuts down cleanly) and reap it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

