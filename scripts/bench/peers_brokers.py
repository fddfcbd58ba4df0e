"""Private Redis and RabbitMQ servers for ``peers_cpu.py``: each on a loopback port of its
own, with its data in a temporary directory, started and stopped by the benchmark (never
the machine's own instances). Every wait is bounded; a server that does not come up
raises ``BrokerError`` and the systems that need it are reported as failed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "peer_apps"))
from bench_job import Resp

REDIS_SERVER = "/usr/bin/redis-server"
RABBITMQ_SERVER = "/usr/sbin/rabbitmq-server"


class BrokerError(Exception):
    """A private server that could not be started."""


@dataclass
class Server:
    """A running private server: its process (own session), data directory and URL."""

    name: str
    proc: subprocess.Popen
    tmp: Path
    url: str
    version: str
    env: dict[str, str]
    stop_cmd: list[str] | None = None

    @property
    def address(self) -> str:
        """``host:port`` of the server."""
        return self.url.split("//", 1)[1].split("@")[-1].split("/")[0]

    def log_tail(self, chars: int = 1500) -> str:
        """The end of the server's own output."""
        try:
            return (self.tmp / "server.out").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (its own stop command first, if any), then delete its data."""
        if self.stop_cmd and self.proc.poll() is None:
            try:
                subprocess.run(self.stop_cmd, env=self.env, capture_output=True,
                               timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        shutil.rmtree(self.tmp, ignore_errors=True)


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(timeout: float = 20.0) -> Server:
    """A private ``redis-server`` on a free loopback port, no persistence."""
    if not os.access(REDIS_SERVER, os.X_OK):
        raise BrokerError(f"{REDIS_SERVER} is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    port = free_port()
    with open(tmp / "server.out", "w") as out:
        proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp),
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    version = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True,
                             timeout=10).stdout.split("v=")[-1].split()[0]
    server = Server("Redis", proc, tmp, f"redis://127.0.0.1:{port}/0", version, {})
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = Resp(server.address, timeout=2)
            try:
                if client.command("PING") == b"PONG":
                    return server
            finally:
                client.close()
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise BrokerError(f"redis-server did not start within {timeout:.0f} s:\n"
                              f"{server.log_tail()}")
        time.sleep(0.05)


def rabbitmq_script(name: str) -> Path:
    """The real ``rabbitmq-*`` script: Debian's /usr/sbin one is a wrapper that switches
    to the rabbitmq user (dropping a private HOME) when run as root."""
    real = Path(os.path.realpath(RABBITMQ_SERVER))
    return real.parent / name


def start_rabbitmq(timeout: float = 90.0) -> Server:
    """A private RabbitMQ node (its own node name, ports, data, logs and cookie), no
    plugins, on a free loopback port; ready once it answers the AMQP handshake."""
    if not os.access(RABBITMQ_SERVER, os.X_OK):
        raise BrokerError(f"{RABBITMQ_SERVER} is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-"))
    port, dist_port = free_port(), free_port()
    node = f"supbench{os.getpid()}@localhost"
    (tmp / "enabled_plugins").write_text("[].\n")
    (tmp / "rabbitmq-env.conf").write_text("")
    (tmp / "rabbitmq.conf").write_text("log.console = false\nlog.file.level = warning\n")
    env = dict(os.environ, HOME=str(tmp), RABBITMQ_NODENAME=node,
               RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(port),
               RABBITMQ_DIST_PORT=str(dist_port), RABBITMQ_MNESIA_BASE=str(tmp / "mnesia"),
               RABBITMQ_LOG_BASE=str(tmp / "log"), RABBITMQ_PID_FILE=str(tmp / "pid"),
               RABBITMQ_ENABLED_PLUGINS_FILE=str(tmp / "enabled_plugins"),
               RABBITMQ_CONF_ENV_FILE=str(tmp / "rabbitmq-env.conf"),
               RABBITMQ_CONFIG_FILE=str(tmp / "rabbitmq.conf"),
               RABBITMQ_ADVANCED_CONFIG_FILE=str(tmp / "advanced.config"),
               ERL_EPMD_ADDRESS="127.0.0.1")
    env.pop("RABBITMQ_CONFIG_FILES", None)
    with open(tmp / "server.out", "w") as out:
        proc = subprocess.Popen([str(rabbitmq_script("rabbitmq-server"))], env=env, cwd=tmp,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    ctl = [str(rabbitmq_script("rabbitmqctl")), "-n", node]
    server = Server("RabbitMQ", proc, tmp, f"amqp://guest:guest@127.0.0.1:{port}//", "?",
                    env, stop_cmd=[*ctl, "stop"])
    deadline = time.monotonic() + timeout
    while not amqp_ready(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise BrokerError(f"rabbitmq-server did not start within {timeout:.0f} s:\n"
                              f"{server.log_tail()}")
        time.sleep(0.2)
    try:
        status = subprocess.run([*ctl, "version"], env=env, capture_output=True, text=True,
                                timeout=60)
        server.version = status.stdout.strip() or "?"
    except subprocess.TimeoutExpired:
        pass
    return server


def amqp_ready(port: int) -> bool:
    """True once the server answers an AMQP 0-9-1 protocol header with a method frame."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            return sock.recv(1)[:1] == b"\x01"
    except OSError:
        return False
