"""The supervisor through a real PgBouncer in transaction pooling mode, and poll-only mode.

PgBouncer (Debian's, 1.18 here) is started per test on a free loopback port in front of
the test's PostgreSQL. In transaction mode it accepts LISTEN and never delivers a
notification (the client is attached to a server connection only during a transaction),
and it has no protocol-level prepared statements before 1.21: the supervisor must notice
the first, fall back to polling, and stop preparing statements.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from e2e import Supervisor, wait_until
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.enqueue import enqueue_many
from supervisor.config import ConfigError, build_config
from supervisor.db import HistoryWriter

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
needs_pgbouncer = pytest.mark.skipif(PGBOUNCER is None,
                                     reason="pgbouncer is not installed (apt-get install "
                                            "pgbouncer)")
DEAF = "a NOTIFY did not arrive"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def bouncer_dsn(dsn, tmp_path):
    """A DSN for ``dsn``'s database through PgBouncer in transaction pooling mode."""
    target = conninfo_to_dict(dsn)
    port = _free_port()
    tmp_path.chmod(0o755)  # pgbouncer drops root for the user named below
    (tmp_path / "users.txt").write_text(f'"{target.get("user", "postgres")}" ""\n')
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(f"""[databases]
* = host={target.get("host", "127.0.0.1")} port={target.get("port", 5432)}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {tmp_path / "users.txt"}
pool_mode = transaction
default_pool_size = 4
server_round_robin = 1
min_pool_size = 4
ignore_startup_parameters = extra_float_digits,options
""")
    if os.getuid() == 0:  # it refuses to run as root
        with ini.open("a") as f:
            f.write("user = nobody\n")
    log = (tmp_path / "pgbouncer.log").open("wb")  # opened here: it may not reach tmp_path
    proc = subprocess.Popen([PGBOUNCER, str(ini)], stdout=subprocess.DEVNULL, stderr=log)
    through = make_conninfo(dsn, host="127.0.0.1", port=port)

    def answers() -> bool:
        try:
            with psycopg.connect(through, connect_timeout=1, autocommit=True) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            assert proc.poll() is None, (tmp_path / "pgbouncer.log").read_text()
            return False
    try:
        wait_until(answers, timeout=15, interval=0.05, what="pgbouncer to answer")
        yield through
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _drain_through(bouncer_dsn: str, dsn: str, *flags: str, jobs: int = 200) -> Supervisor:
    """Enqueue ``jobs`` no-ops directly, let a supervisor run them through PgBouncer with
    ``--burst``; asserts every job completed and the supervisor exited 0."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many("e2e_noop", [{"n": i} for i in range(jobs)], conn=conn)
    sup = Supervisor(bouncer_dsn, "--burst", "-n", "2", "--poll-interval", "0.1", *flags)
    code = sup.wait(90)
    assert code == 0, sup.err
    with psycopg.connect(dsn) as conn:
        done = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'")
        assert done.fetchone()[0] == jobs, sup.err
    assert "failed, will try again" not in sup.err, sup.err
    return sup


@pytest.mark.slow
@needs_pgbouncer
def test_deaf_listen_behind_pgbouncer_is_detected_and_jobs_still_run(bouncer_dsn, dsn):
    """Default settings through PgBouncer in transaction mode: the self-NOTIFY probe
    notices LISTEN is deaf, warns once, and the supervisor works by polling with no
    prepared-statement errors."""
    sup = _drain_through(bouncer_dsn, dsn)
    assert sup.err.count(DEAF) == 1, sup.err


@pytest.mark.slow
@needs_pgbouncer
def test_no_listen_through_pgbouncer_runs_every_job_without_probing(bouncer_dsn, dsn):
    """``--no-listen`` skips LISTEN and the probe altogether."""
    sup = _drain_through(bouncer_dsn, dsn, "--no-listen")
    assert DEAF not in sup.err, sup.err


@pytest.mark.slow
@needs_pgbouncer
def test_a_waiting_supervisor_behind_pgbouncer_picks_up_new_work_by_polling(bouncer_dsn,
                                                                           dsn):
    """A job enqueued after start, with NOTIFY lost in the pooler, still runs within a
    few poll intervals."""
    sup = Supervisor(bouncer_dsn, "-n", "1", "--poll-interval", "0.2")
    try:
        sup.wait_for_log(DEAF, timeout=30)
        sup.wait_for_log("starting 1 children", timeout=30)
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue_many("e2e_noop", [{"n": 1}], conn=conn)
            query = "SELECT state FROM supervisor.jobs"
            wait_until(lambda: conn.execute(query).fetchone() == ("completed",),
                       timeout=20, what="the job to complete")
    finally:
        sup.stop()


@pytest.mark.slow
def test_direct_connection_keeps_listen_and_no_listen_drops_it(dsn):
    """Against PostgreSQL itself the probe passes (no warning, a listen connection in
    pg_stat_activity); with ``--no-listen`` there is no listen connection."""
    def conns(conn: psycopg.Connection, role: str) -> int:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND application_name LIKE %s",
                            (f"supervisor % {role}",)).fetchone()[0]

    def registered(conn: psycopg.Connection, pid: int) -> bool:
        return conn.execute("SELECT count(*) FROM supervisor.supervisors WHERE pid = %s",
                            (pid,)).fetchone()[0] == 1

    with psycopg.connect(dsn, autocommit=True) as conn:
        for flags, expected in (((), 1), (("--no-listen",), 0)):
            sup = Supervisor(dsn, "-n", "1", *flags)
            try:
                # This supervisor's first maintenance round (its row) comes after all of
                # its connections are open.
                wait_until(lambda pid=sup.proc.pid: registered(conn, pid), timeout=30,
                           what="the first maintenance round")
                assert conns(conn, "claims") == 1
                assert conns(conn, "listen") == expected, flags
                assert DEAF not in sup.err
            finally:
                sup.stop()


def test_listen_setting_in_the_config_file():
    """``listen = false`` in the settings file turns LISTEN off; text is refused."""
    assert build_config({}).listen is True
    assert build_config({"listen": False}).listen is False
    with pytest.raises(ConfigError, match="listen"):
        build_config({"listen": "no"})


def test_no_listen_flag_is_documented_in_help():
    """``supervisor run --help`` names the flag (a typo in the option would hide it)."""
    out = subprocess.run([sys.executable, "-m", "supervisor", "run",
                          "--help"], capture_output=True, text=True,
                         cwd=str(Path(__file__).resolve().parent.parent), check=False)
    assert "--no-listen" in out.stdout, out.stderr


@needs_pgbouncer
def test_the_history_through_pgbouncer_leaves_no_setting_on_its_server_connections(
        bouncer_dsn, dsn):
    """The depth count's short statement timeout is SET LOCAL in a transaction of its
    own: a session SET would stay with whichever server connection ran it, and the next
    client PgBouncer gives it to would have its statements cancelled at 250 ms."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = "
                     "date_trunc('minute', now()) - interval '10 minutes'")
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at) "
                     "VALUES ('k', 'q', 'completed', 1, now() - interval '5 minutes')")
        enqueue_many("e2e_noop", [{}] * 2, queue="waiting", conn=conn)
        default = conn.execute("SHOW statement_timeout").fetchone()[0]
    with selectors.DefaultSelector() as selector:
        writer = HistoryWriter(bouncer_dsn, "supervisor test history", selector,
                               statement_timeout=2.0, deadline=3.0, lag=-120,
                               slice_seconds=3600)
        writer.request()
        ends = time.monotonic() + 15
        while writer.busy and time.monotonic() < ends:
            for key, mask in selector.select(0.02):
                key.data.handle_event(key, mask)
            writer.tick(time.monotonic())
        writer.close()
    assert writer.last is not None and writer.last.errors == []
    assert (writer.last.rolled, writer.last.sampled) == (1, 1)
    # Every server connection of the pool (four, handed out in turn) as it was.
    seen = set()
    for _ in range(12):
        with psycopg.connect(bouncer_dsn, autocommit=True) as conn:
            seen.add(conn.execute("SHOW statement_timeout").fetchone()[0])
    assert seen == {default}
