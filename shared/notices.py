"""The frames of checkpoints and stop notices (issue 28), re-exported by ``shared.wire``.

Child to parent: ``Checkpoint`` (a running job's state, as the JSON bytes the handler's
``current_job().checkpoint(...)`` made; ``flush`` asks for ``Checkpointed`` once it is
written). Parent to child: ``Checkpointed`` and ``Stopping`` (the running job is about
to be stopped from outside: a drain, a cancel, a fence, a memory recycle; ``reason``
says which, in one word). Like ``Done``, a checkpoint's body is the job id as 8 bytes
followed by the JSON text, which the parent stores without decoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from shared.frames import (
    CHECKPOINT,
    CHECKPOINTED,
    FLAG_FLUSH,
    HEADER,
    STOPPING,
    TYPE_NAMES,
    VERSION,
    Frame,
    ProtocolError,
)

_JOB_ID = struct.Struct("!q")
_ID_SIZE = _JOB_ID.size
_pack_header = HEADER.pack


def _split(frame: Frame) -> tuple[int, bytes]:
    body = frame.body
    if len(body) < _ID_SIZE:
        raise ProtocolError(f"{TYPE_NAMES[frame.type]} body lacks its job id")
    return _JOB_ID.unpack_from(body)[0], body[_ID_SIZE:]


def _frame(mtype: int, job_id: int, rest: bytes = b"", flags: int = 0) -> bytes:
    return (_pack_header(VERSION, mtype, flags, _ID_SIZE + len(rest))
            + _JOB_ID.pack(job_id) + rest)


@dataclass(slots=True)
class Checkpoint:
    """``job``'s handler stored ``state`` (JSON bytes); ``flush``: it waits for the
    write (``Checkpointed``)."""

    TYPE: ClassVar[int] = CHECKPOINT
    job: int
    state: bytes
    flush: bool = False

    def encode(self) -> bytes:
        """This message as one frame."""
        return _frame(CHECKPOINT, self.job, self.state, FLAG_FLUSH if self.flush else 0)

    @classmethod
    def decode(cls, frame: Frame) -> Checkpoint:
        """The message a CHECKPOINT frame carries."""
        job_id, state = _split(frame)
        try:
            state.decode()
        except UnicodeDecodeError:
            raise ProtocolError("CHECKPOINT state is not UTF-8 JSON text") from None
        return cls(job_id, state, bool(frame.flags & FLAG_FLUSH))


@dataclass(slots=True)
class Checkpointed:
    """The parent wrote ``job``'s checkpoint (``written``), or its write was fenced off
    (the job is no longer this supervisor's)."""

    TYPE: ClassVar[int] = CHECKPOINTED
    job: int
    written: bool = True

    def encode(self) -> bytes:
        """This message as one frame."""
        return _frame(CHECKPOINTED, self.job, b"\x01" if self.written else b"\x00")

    @classmethod
    def decode(cls, frame: Frame) -> Checkpointed:
        """The message a CHECKPOINTED frame carries."""
        job_id, rest = _split(frame)
        return cls(job_id, rest != b"\x00")


@dataclass(slots=True)
class Stopping:
    """``job`` is about to be stopped from outside (``reason``: drain, cancel, fence,
    memory); the child has ``kill_grace`` (or what is left of the drain's grace)."""

    TYPE: ClassVar[int] = STOPPING
    job: int
    reason: str = "drain"

    def encode(self) -> bytes:
        """This message as one frame."""
        return _frame(STOPPING, self.job, self.reason.encode())

    @classmethod
    def decode(cls, frame: Frame) -> Stopping:
        """The message a STOPPING frame carries."""
        job_id, rest = _split(frame)
        return cls(job_id, rest.decode(errors="replace") or "drain")
