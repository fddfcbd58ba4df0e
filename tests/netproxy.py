"""A TCP proxy on loopback that a test controls, to cut one process off from PostgreSQL
while others still reach it, the way a network partition does.

Forwarding at first: bytes flow both ways. ``blackhole``: nothing flows any more and
nothing is closed; new connections are accepted and never answered (packets dropped,
not refused: the client sees silence, as in a real partition or a hung server).
``heal``: the held connections are dropped (their TCP state did not survive) and new
ones are forwarded again. ``thaw``: everything held flows again, as when a hung server
or a pooler holding queries resumes. Threads are
fine here: this is the test process, not the forking parent.
"""

from __future__ import annotations

import selectors
import socket
import threading


class PartitionProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` until told otherwise."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: dict[socket.socket, socket.socket] = {}  # each side to the other
        self._held: list[socket.socket] = []  # accepted during a blackhole, never served
        self.cut = False
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="partition-proxy", daemon=True)
        self._thread.start()

    def blackhole(self) -> None:
        """Stop forwarding: every byte either way is dropped, nothing is closed."""
        with self._lock:
            self.cut = True
        self._wake()

    def sever(self) -> None:
        """Close every connection now (the client sees a reset at once) and hold new
        ones unanswered, as a partition that began with a failover does."""
        with self._lock:
            self.cut = True
            doomed = list(self._pairs)
            self._pairs.clear()
        for sock in doomed:
            sock.close()
        self._wake()

    def heal(self) -> None:
        """Drop what the partition held; forward new connections again."""
        with self._lock:
            self.cut = False
            doomed = list(self._pairs) + self._held
            self._pairs.clear()
            self._held = []
        for sock in doomed:
            sock.close()
        self._wake()

    def thaw(self) -> None:
        """Resume: held connections flow again, those accepted meanwhile are served."""
        with self._lock:
            self.cut = False
            waiting, self._held = self._held, []
        for client in waiting:
            self._serve(client)
        self._wake()

    def close(self) -> None:
        """Stop the proxy and close every socket."""
        self._closed = True
        self.heal()
        self._thread.join(timeout=5)
        self._listener.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        watched: set[socket.socket] = set()
        while not self._closed:
            with self._lock:
                live = set() if self.cut else set(self._pairs)
            for sock in watched - live:
                try:
                    sel.unregister(sock)
                except (KeyError, ValueError):
                    pass
            for sock in live - watched:
                sel.register(sock, selectors.EVENT_READ, "data")
            watched = live
            for key, _ in sel.select(0.2):
                if key.data == "wake":
                    key.fileobj.recv(4096)
                elif key.data == "accept":
                    self._accept()
                else:
                    self._pump(key.fileobj)
        sel.close()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        with self._lock:
            if self.cut:
                self._held.append(client)
                return
        self._serve(client)

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._pairs[client] = server
            self._pairs[server] = client

    def _pump(self, sock: socket.socket) -> None:
        with self._lock:
            other = self._pairs.get(sock)
            if self.cut or other is None:
                return
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            with self._lock:
                self._pairs.pop(sock, None)
                self._pairs.pop(other, None)
            sock.close()
            other.close()
            return
        try:
            other.sendall(data)
        except OSError:
            pass
