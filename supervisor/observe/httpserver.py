"""A tiny HTTP/1.0 server for ``/metrics``, driven by the parent's own selector loop.

The parent is single-threaded (no background server thread: threads and ``fork`` do not
mix), so this server never blocks: the listening socket and every client socket are
registered with the parent's selector with ``data=self``, and the loop hands their events
to ``MetricsServer.handle_event``. Each connection reads one request head, gets one
response and is closed.

A scraper can misbehave in every way (connect and say nothing, send garbage, reset the
connection, read slowly); none of it may raise into the loop or stall it. A connection
gets ``timeout`` seconds in all, from accept to the last byte of the response, and at
most ``MAX_REQUEST`` bytes of request head; past either it is dropped.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import time
from collections.abc import Callable

from shared import defaults

log = logging.getLogger(__name__)

MAX_REQUEST = 8192
MAX_CLIENTS = 32
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
STALE_AFTER = 5.0  # /healthz fails when the loop has not reported for this long


class _Client:
    """One accepted connection: what it sent so far, what is left to send, its deadline."""

    __slots__ = ("deadline", "fd", "inbuf", "outbuf", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.deadline = deadline
        self.inbuf = bytearray()
        self.outbuf: memoryview | None = None


class MetricsServer:
    """Serve ``render()`` at ``GET /metrics`` from the caller's selector, no threads.

    ``render`` returns the body (Prometheus text format). ``GET /`` and ``/healthz``
    answer a short 200, other paths 404, other methods 405. The listening socket is
    close-on-exec. ``port=0`` picks a free port; ``.port`` says which.

    The loop must call ``handle_event(key, mask)`` for every ready key whose ``data`` is
    this server, and should wake by ``next_deadline()`` and call ``tick()`` so that idle
    connections are closed even when nothing else happens.
    """

    def __init__(
        self,
        port: int,
        render: Callable[[], bytes],
        selector: selectors.BaseSelector,
        host: str = defaults.METRICS_HOST,
        *,
        timeout: float = 5.0,
    ) -> None:
        """Listen on ``host:port`` and register with ``selector``. Raises ``OSError``
        with a one-line message naming the address when it cannot listen there."""
        self._render = render
        self._selector = selector
        self._reported_at: float | None = None
        self._problem: str | None = None
        self._timeout = timeout
        self._clients: dict[int, _Client] = {}
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                message = f"metrics port {port} on {host} is already in use"
            else:
                message = f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            raise OSError(exc.errno, message) from None
        sock.setblocking(False)
        # Python makes sockets non-inheritable already; said again because a forked child
        # holding the port would keep it bound after the parent is gone.
        sock.set_inheritable(False)
        self._listener: socket.socket | None = sock
        self.host = host
        self.port: int = sock.getsockname()[1]
        selector.register(sock, selectors.EVENT_READ, data=self)

    def handle_event(self, key: selectors.SelectorKey, mask: int) -> None:
        """Act on one ready key of this server: accept, read, or write. Never raises
        for anything a client does."""
        now = time.monotonic()
        if self._listener is not None and key.fd == self._listener.fileno():
            self._accept(now)
        else:
            client = self._clients.get(key.fd)
            if client is not None:
                if mask & selectors.EVENT_READ and client.outbuf is None:
                    self._read(client)
                elif mask & selectors.EVENT_WRITE and client.outbuf is not None:
                    self._write(client)
        self.tick(now)

    def next_deadline(self) -> float | None:
        """The ``time.monotonic()`` at which ``tick`` next has a connection to drop."""
        if not self._clients:
            return None
        return min(c.deadline for c in self._clients.values())

    def report(self, now: float, problem: str | None) -> None:
        """The loop turned at ``now``; ``problem`` says what makes it unhealthy (None:
        healthy). ``/healthz`` answers 200 only while the last report is recent and had
        no problem, else 503 with the reason."""
        self._reported_at = now
        self._problem = problem

    def health(self, now: float) -> str | None:
        """Why ``/healthz`` fails now, or None."""
        if self._reported_at is None or now - self._reported_at > STALE_AFTER:
            return "the supervisor's loop has not turned recently"
        return self._problem

    def tick(self, now: float | None = None) -> None:
        """Close connections that have outlived their deadline at ``now``."""
        if not self._clients:
            return
        if now is None:
            now = time.monotonic()
        for client in [c for c in self._clients.values() if c.deadline <= now]:
            self._drop(client)

    @property
    def connections(self) -> int:
        """How many client connections are open."""
        return len(self._clients)

    def close(self) -> None:
        """Unregister and close the listening socket and every connection; idempotent."""
        for client in list(self._clients.values()):
            self._drop(client)
        if self._listener is not None:
            sock, self._listener = self._listener, None
            self._unregister(sock)
            sock.close()

    def _accept(self, now: float) -> None:
        assert self._listener is not None
        # Bounded so that a connection flood cannot keep the loop in here.
        for _ in range(MAX_CLIENTS):
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # ECONNABORTED, EMFILE and friends: nothing to serve, the loop carries on.
                log.debug("metrics accept failed: %s", exc)
                return
            if len(self._clients) >= MAX_CLIENTS:
                sock.close()
                continue
            sock.setblocking(False)
            client = _Client(sock, now + self._timeout)
            self._clients[client.fd] = client
            self._selector.register(sock, selectors.EVENT_READ, data=self)

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(client)
            return
        if not data:
            self._drop(client)
            return
        client.inbuf += data
        head_end = client.inbuf.find(b"\r\n\r\n")
        if head_end < 0:
            head_end = client.inbuf.find(b"\n\n")
        if head_end < 0:
            if len(client.inbuf) > MAX_REQUEST:
                self._drop(client)
            return
        if head_end > MAX_REQUEST:
            self._drop(client)
            return
        self._respond(client, bytes(client.inbuf[:head_end]))

    def _respond(self, client: _Client, head: bytes) -> None:
        status, body, headers = self._route(head)
        lines = [f"HTTP/1.0 {status} {_REASONS[status]}", *headers]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        client.outbuf = memoryview("\r\n".join(lines).encode("ascii") + body)
        self._write(client)
        if client.outbuf is not None and self._clients.get(client.fd) is client:
            self._selector.modify(client.sock, selectors.EVENT_WRITE, data=self)

    def _route(self, head: bytes) -> tuple[int, bytes, list[str]]:
        text = "text/plain; charset=utf-8"
        parts = head.split(b"\n", 1)[0].strip().split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, b"bad request\n", [f"Content-Type: {text}"]
        method, target = parts[0], parts[1]
        path = target.split(b"?", 1)[0]
        if method != b"GET":
            return 405, b"method not allowed\n", [f"Content-Type: {text}", "Allow: GET"]
        if path == b"/metrics":
            try:
                body = self._render()
            except Exception:
                # A bug in a metric must not take the supervisor down with it.
                log.exception("rendering metrics failed")
                return 500, b"rendering metrics failed\n", [f"Content-Type: {text}"]
            return 200, body, [f"Content-Type: {CONTENT_TYPE}"]
        if path in (b"/", b"/healthz"):
            problem = self.health(time.monotonic())
            if problem is not None:
                return 503, f"unhealthy: {problem}\n".encode(), [f"Content-Type: {text}"]
            return 200, b"ok: supervisor metrics at /metrics\n", [f"Content-Type: {text}"]
        return 404, b"not found\n", [f"Content-Type: {text}"]

    def _write(self, client: _Client) -> None:
        buf = client.outbuf
        assert buf is not None
        try:
            sent = client.sock.send(buf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(client)
            return
        if sent < len(buf):
            client.outbuf = buf[sent:]
            return
        client.outbuf = None
        self._finish(client)

    def _finish(self, client: _Client) -> None:
        # Read what the client may still have sent (a body we ignored): closing a socket
        # with unread input sends RST, which can destroy the response in flight.
        try:
            client.sock.shutdown(socket.SHUT_WR)
            client.sock.recv(65536)
        except OSError:
            pass
        self._drop(client)

    def _drop(self, client: _Client) -> None:
        if self._clients.get(client.fd) is not client:
            return
        del self._clients[client.fd]
        self._unregister(client.sock)
        client.sock.close()

    def _unregister(self, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
