"""The one job every system runs in ``peers_cpu.py``, and the counter that times it.

Standard library only, so the very same module is imported by ``multiprocessing.Pool``,
``supervisor run`` and each peer in its own virtualenv: the work (``spin``, the same loop
as ``bench_handlers.spin``) and the counting cost the same everywhere. Every job ends by
incrementing one Redis counter (``INCR``, over a plain socket: no client library, so no
system gets a faster or slower one); the job that brings it to ``$BENCH_TARGET`` pushes
its wall-clock time on a list, which the harness waits on with ``BLPOP``. So completion
is observed the same way in every system, without polling.

The counter's Redis is ``$BENCH_COUNTER`` (``host:port``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable

COUNT_KEY = "bench:count"
DONE_KEY = "bench:done"  # the epoch time at which the counter reached the target
STARTED_KEY = "bench:started"  # the epoch times at which long jobs started


def spin(n: int) -> int:
    """Pure-Python CPU work: ``n`` loop iterations (the same loop as bench_handlers)."""
    total = 0
    for i in range(n):
        total = (total + i * i) % 1_000_003
    return total


class RedisError(Exception):
    """An error reply from Redis, or a connection it closed."""


class Resp:
    """A minimal Redis client (RESP2 over TCP), enough for INCR, RPUSH, BLPOP and friends."""

    def __init__(self, address: str, timeout: float | None = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def command(self, *args: object) -> object:
        """Send one command; its reply as int, bytes, list or None."""
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self._reply()

    def _reply(self) -> object:
        line = self.reader.readline()
        if not line:
            raise RedisError("connection closed by Redis")
        kind, body = line[:1], line[1:-2]
        if kind == b":":
            return int(body)
        if kind == b"+":
            return body
        if kind == b"-":
            raise RedisError(body.decode(errors="replace"))
        if kind == b"$":
            size = int(body)
            if size < 0:
                return None
            data = self.reader.read(size + 2)
            return data[:-2]
        if kind == b"*":
            size = int(body)
            return None if size < 0 else [self._reply() for _ in range(size)]
        raise RedisError(f"unexpected reply {line!r}")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


_client: Resp | None = None
_client_pid = 0


def counter() -> Resp:
    """This process's connection to the counter (a new one after a fork)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = Resp(os.environ["BENCH_COUNTER"])
        _client_pid = os.getpid()
    return _client


def count() -> None:
    """Count one finished job; the one that reaches ``$BENCH_TARGET`` records the time."""
    client = counter()
    value = client.command("INCR", COUNT_KEY)
    if value == int(os.environ.get("BENCH_TARGET", "0")):
        client.command("RPUSH", DONE_KEY, repr(time.time()))


def cpu(n: int) -> None:
    """The CPU job: ``spin(n)``, then counted."""
    spin(n)
    count()


def noop() -> None:
    """The no-op job: only counted."""
    count()


def long(seconds: float) -> None:
    """A CPU job of ``seconds`` of wall time that says when it starts (for the SIGTERM
    observation), then counted if it gets to the end."""
    counter().command("RPUSH", STARTED_KEY, repr(time.time()))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        spin(20_000)
    count()


def peer_main(script: str, enqueue: Callable[[str, int, float], None],
              probe: Callable[[], str]) -> None:
    """The command line every peer app shares: ``enqueue KIND COUNT ARG`` puts the jobs
    on its broker, ``probe`` prints what became of the job running at SIGTERM."""
    if len(sys.argv) == 5 and sys.argv[1] == "enqueue":
        enqueue(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif sys.argv[1:] == ["probe"]:
        print(probe())
    else:
        raise SystemExit(f"usage: {script} enqueue KIND COUNT ARG | probe")
