"""Framing for the wire between the parent and its children: length-prefixed frames.

A frame is a fixed 7-byte header followed by a body::

    version (u8) | message type (u8) | flags (u8) | body length (u32, network order)

What a body holds is ``shared.wire``'s business (the typed messages); this module only
cuts a byte stream into frames and back. "This was my last answer" travels as a header
flag (``FLAG_LAST``) so that DONE's body can stay the handler's raw result. The size cap
is checked against the header, before any of the body is read, so a corrupt length
cannot make the parent buffer gigabytes.

The parent uses ``FrameReader`` (fed whatever a non-blocking read returned) and
``FrameWriter`` (queues bytes, writes what the pipe takes). The child uses the blocking
``BlockingReader`` and ``write_all``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from shared import defaults

VERSION = 1

# Message types (their bodies: the classes of the same name in ``shared.wire``).
# Parent to child: RUN, STOP, SKIP, CHECKPOINTED, STOPPING, DISCARDED. Child to parent:
# the rest.
READY = 1
RUN = 2
HEARTBEAT = 3
DONE = 4
FAILED = 5
STOP = 6
BOOT_ERROR = 7
START = 8  # the child takes the next job of its queue: from now on it is running
SKIP = 9  # a job queued in the child must not run (cancelled, or its lease was lost)
SKIPPED = 10  # the child dropped a queued job it was told to skip: it never ran
CHECKPOINT = 11  # a running job's handler stored its state (issue 28)
CHECKPOINTED = 12  # the parent wrote a checkpoint the handler waits for (flush=True)
STOPPING = 13  # the running job is about to be stopped from outside: save and return
DISCARDED = 14  # a job the parent discarded (its child died): run the on_discard hooks

TYPE_NAMES = {
    READY: "READY",
    RUN: "RUN",
    HEARTBEAT: "HEARTBEAT",
    DONE: "DONE",
    FAILED: "FAILED",
    STOP: "STOP",
    BOOT_ERROR: "BOOT_ERROR",
    START: "START",
    SKIP: "SKIP",
    SKIPPED: "SKIPPED",
    CHECKPOINT: "CHECKPOINT",
    CHECKPOINTED: "CHECKPOINTED",
    STOPPING: "STOPPING",
    DISCARDED: "DISCARDED",
}

# Header flags.
FLAG_LAST = 0x01  # the child exits right after this answer: never dispatch to it again
FLAG_USAGE = 0x02  # DONE: the body carries the attempt's usage after the job id
FLAG_OUTPUT = 0x04  # DONE: then the length-prefixed tail of what the attempt printed
# CHECKPOINT: the handler waits until it is written (CHECKPOINTED). Every flag has a bit
# of its own, though each is read for one frame type only, so none is ever misread.
FLAG_FLUSH = 0x08

HEADER = struct.Struct("!BBBI")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_BODY = defaults.MAX_FRAME_BYTES

_pack_header = HEADER.pack
_unpack_header = HEADER.unpack_from
_dumps = orjson.dumps
_tuple_new = tuple.__new__


class ProtocolError(Exception):
    """A frame that cannot be trusted: wrong version, unknown type, or a body over the
    cap. The peer is broken; the connection (and the child) must be given up."""


class Frame(NamedTuple):
    """One received frame. ``body`` is raw bytes; decode with ``frame.json()``."""

    type: int
    flags: int
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON (an empty body decodes to an empty dict)."""
        return orjson.loads(self.body) if self.body else {}

    @property
    def last(self) -> bool:
        """True if the sender exits right after this frame."""
        return bool(self.flags & FLAG_LAST)


def encode(mtype: int, body: Any = None, flags: int = 0) -> bytes:
    """One frame with ``body`` serialized by orjson (None means an empty body)."""
    data = b"" if body is None else _dumps(body)
    return _pack_header(VERSION, mtype, flags, len(data)) + data


def encode_raw(mtype: int, data: bytes, flags: int = 0) -> bytes:
    """One frame whose body is already-encoded bytes (DONE carries result JSON)."""
    return _pack_header(VERSION, mtype, flags, len(data)) + data


class FrameReader:
    """Incremental decoder for a non-blocking pipe: ``feed`` it whatever ``read``
    returned and get back the complete frames so far."""

    __slots__ = ("_buf", "max_body")

    def __init__(self, max_body: int = DEFAULT_MAX_BODY) -> None:
        self._buf = b""
        self.max_body = max_body

    @property
    def pending(self) -> int:
        """Bytes received that do not make a whole frame yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """Add received bytes; return every frame they complete, in order."""
        if not self._buf and len(data) >= HEADER_SIZE:
            # The common case on a pipe: exactly one whole frame per read.
            version, mtype, flags, length = _unpack_header(data)
            if (len(data) == HEADER_SIZE + length and version == VERSION
                    and mtype in TYPE_NAMES and length <= self.max_body):
                return [_tuple_new(Frame, (mtype, flags, data[HEADER_SIZE:]))]
        buf = self._buf + data if self._buf else data
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        while end - pos >= HEADER_SIZE:
            version, mtype, flags, length = _unpack_header(buf, pos)
            if version != VERSION:
                raise ProtocolError(f"wire version {version}, expected {VERSION}")
            if mtype not in TYPE_NAMES:
                raise ProtocolError(f"unknown message type {mtype}")
            if length > self.max_body:
                raise ProtocolError(
                    f"{TYPE_NAMES[mtype]} frame of {length} bytes is over the "
                    f"{self.max_body}-byte cap")
            start = pos + HEADER_SIZE
            if end - start < length:
                break
            pos = start + length
            frames.append(Frame(mtype, flags, buf[start:pos]))
        self._buf = buf[pos:] if pos < end else b""
        return frames


class FrameWriter:
    """Outgoing bytes for one non-blocking pipe. The parent never blocks on a child:
    ``send`` writes what the pipe takes now and keeps the rest; ``flush`` continues
    when the selector says the pipe is writable again."""

    __slots__ = ("_chunks", "_size")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0

    @property
    def wants_write(self) -> bool:
        """True while bytes are waiting for the pipe to become writable."""
        return self._size > 0

    @property
    def pending(self) -> int:
        """Bytes queued and not yet written."""
        return self._size

    def send(self, data: bytes, write: Callable[[bytes], int]) -> bool:
        """Queue ``data`` and write as much as possible. True if all of it went out."""
        if self._size:
            self._chunks.append(data)
            self._size += len(data)
            return self.flush(write)
        try:
            n = write(data)
        except BlockingIOError:
            n = 0
        if n == len(data):
            return True
        rest = data[n:]
        self._chunks.append(rest)
        self._size = len(rest)
        return False

    def flush(self, write: Callable[[bytes], int]) -> bool:
        """Write queued bytes until the pipe is full. True when nothing is left."""
        while self._chunks:
            chunk = self._chunks[0]
            try:
                n = write(chunk)
            except BlockingIOError:
                return False
            self._size -= n
            if n < len(chunk):
                self._chunks[0] = chunk[n:]
                return False
            self._chunks.pop(0)
        return True

    def clear(self) -> None:
        """Drop everything queued (the peer is gone)."""
        self._chunks.clear()
        self._size = 0


class BlockingReader:
    """Frames from a blocking fd, for the child: ``next()`` returns a frame, or None
    at end of file (the parent is gone)."""

    def __init__(self, fd: int, max_body: int = DEFAULT_MAX_BODY, chunk: int = 65536) -> None:
        self.fd = fd
        self._reader = FrameReader(max_body)
        self._ready: list[Frame] = []
        self._chunk = chunk

    def next(self) -> Frame | None:
        """The next frame; blocks until one is complete. None at end of file."""
        while not self._ready:
            data = os.read(self.fd, self._chunk)
            if not data:
                return None
            self._ready = self._reader.feed(data)
        return self._ready.pop(0)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to a blocking fd."""
    n = os.write(fd, data)
    if n == len(data):
        return
    view = memoryview(data)[n:]
    while view:
        n = os.write(fd, view)
        view = view[n:]
