"""The messages the parent and its children exchange: one small class per frame type.

Parent to child: ``Run`` (one job; the parent writes several RUN frames at once to keep
a child's queue stocked), ``Skip`` (a queued job must not run) and ``Stop``. Child to
parent: ``Ready``, ``Start`` (the child takes the next job of its queue), ``Skipped``
(it dropped a queued job it was told to skip), ``Heartbeat``, ``Done``, ``Failed`` and
``BootError``; and the frames of checkpoints and stop notices (``Checkpoint``, and parent to
child ``Checkpointed`` and ``Stopping``, in ``shared.notices``), and parent to child
``Discarded`` (a job the parent discarded, for the on_discard hooks: ``shared.discarded``).
Each class has ``encode()``, which returns a whole frame, and ``decode(frame)``, which
raises ``ProtocolError`` for a body that does not fit the type. The framing itself
(header, size cap, readers, writers) is ``shared.frames``; its names are re-exported
here, so ``shared.wire`` is the one door.

Two bodies are shaped for the parent's per-job path, where it never parses what it
only carries:

- ``Run`` embeds the job's args as the JSON text the database gave (``orjson.Fragment``)
  and puts them last. If the child cannot parse them (PostgreSQL accepts numbers and
  depths orjson refuses) the rest of the body still names the job, so the job fails
  with an ``args`` error instead of the child dying (``Run.args_error``).
- ``Done`` is the job id as 8 bytes followed by the handler's result as JSON text,
  which the parent hands to the store as it came. With ``FLAG_USAGE`` the attempt's
  usage (``shared.usage``, 24 bytes) sits between the two; with ``FLAG_OUTPUT`` then
  the tail of what the attempt printed (4-byte length, UTF-8 text). ``Failed`` carries
  both as the optional keys ``usage`` (``[cpu, wall, rss]``) and ``output``.

Every answer names its job, so the parent can drop one for a job it did not give.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import orjson

from shared.discarded import Discarded
from shared.frames import (
    BOOT_ERROR,
    CHECKPOINT,
    CHECKPOINTED,
    DEFAULT_MAX_BODY,
    DISCARDED,
    DONE,
    FAILED,
    FLAG_FLUSH,
    FLAG_LAST,
    FLAG_OUTPUT,
    FLAG_USAGE,
    HEADER,
    HEADER_SIZE,
    HEARTBEAT,
    READY,
    RUN,
    SKIP,
    SKIPPED,
    START,
    STOP,
    STOPPING,
    TYPE_NAMES,
    VERSION,
    BlockingReader,
    Frame,
    FrameReader,
    FrameWriter,
    ProtocolError,
    encode,
    encode_raw,
    write_all,
)
from shared.notices import Checkpoint, Checkpointed, Stopping
from shared.usage import PACKED as _USAGE
from shared.usage import Usage

__all__ = [
    "BOOT_ERROR", "CHECKPOINT", "CHECKPOINTED", "DEFAULT_MAX_BODY", "DISCARDED", "DONE",
    "FAILED",
    "FLAG_FLUSH", "FLAG_LAST", "FLAG_OUTPUT", "FLAG_USAGE", "HEADER",
    "HEADER_SIZE", "HEARTBEAT", "READY", "RUN", "SKIP", "SKIPPED", "START", "STOP",
    "STOPPING", "TYPE_NAMES",
    "VERSION", "BlockingReader", "BootError", "Checkpoint", "Checkpointed", "Discarded",
    "Done",
    "DoneBody", "Failed", "Frame", "FrameReader",
    "FrameWriter", "Heartbeat", "Message", "ProtocolError", "Ready", "Run", "Skip",
    "Skipped", "Start", "Stop", "Stopping",
    "decode", "encode", "encode_raw", "write_all",
]

_pack_header = HEADER.pack
_dumps = orjson.dumps
_loads = orjson.loads
_Fragment = orjson.Fragment
_JSONDecodeError = orjson.JSONDecodeError
_JOB_ID = struct.Struct("!q")  # Done's job id, ahead of the result text
_pack_id = _JOB_ID.pack
_unpack_id = _JOB_ID.unpack_from
_ID_SIZE = _JOB_ID.size
_USAGE_SIZE = _USAGE.size
_LENGTH = struct.Struct("!I")  # the output tail's length in a DONE body
_LENGTH_SIZE = _LENGTH.size
# orjson writes keys in order and without spaces, and Run puts "args" last: the first
# ',"args":' is the start of the args (inside a string the quote would be escaped).
_ARGS_KEY = b',"args":'


def _body(frame: Frame, mtype: int) -> dict[str, Any]:
    """The frame's body as a JSON object, or ProtocolError."""
    try:
        body = _loads(frame.body) if frame.body else {}
    except _JSONDecodeError as exc:
        raise ProtocolError(f"{TYPE_NAMES[mtype]} body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"{TYPE_NAMES[mtype]} body is not a JSON object")
    return body


def _missing(mtype: int, exc: Exception) -> ProtocolError:
    return ProtocolError(f"{TYPE_NAMES[mtype]} body lacks {exc}")


@dataclass(slots=True)
class Ready:
    """The child booted and takes jobs from now on."""

    TYPE: ClassVar[int] = READY
    pid: int
    worker: int

    def encode(self) -> bytes:
        """This message as one frame."""
        return encode(READY, {"pid": self.pid, "worker": self.worker})

    @classmethod
    def decode(cls, frame: Frame) -> Ready:
        """The message a READY frame carries."""
        body = _body(frame, READY)
        try:
            return cls(body["pid"], body["worker"])
        except KeyError as exc:
            raise _missing(READY, exc) from None


@dataclass(slots=True)
class Run:
    """Run one job. The parent fills ``args_json`` (the args as JSON text, never decoded
    in the parent); the child gets ``args`` decoded, or ``args_error`` saying why they
    could not be (then ``args`` is None and the job must fail, not the child)."""

    TYPE: ClassVar[int] = RUN
    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    args_json: str | None = None
    args: Any = None
    args_error: str | None = None
    # The producer's trace context (shared.tracing): JSON text from the parent, passed
    # on unparsed; a dict in the child. None: the job was enqueued outside a span.
    trace_context: Any = None
    # The job's last checkpoint (issue 28): JSON text from the parent, passed on unparsed
    # like the args; decoded in the child (``current_job().resume``). None: none stored.
    resume: Any = None
    # Epoch seconds: a job still queued then must not start (the child answers FAILED
    # of kind ``expired`` without a START). None: it never expires.
    expires_at: float | None = None
    # Threads of the native pools for this job (issue 27: a ``cpus=4`` job gets 4 times
    # the child's share); None: the child's own setting.
    threads: int | None = None
    # The indices of each counted resource the job holds (issue 45: ``{"gpu": [1]}``);
    # None: none. The child shows a job its GPUs in CUDA_VISIBLE_DEVICES.
    devices: dict[str, list[int]] | None = None

    @staticmethod
    def pack(job_id: int, kind: str, queue: str, attempt: int, max_attempts: int,
             args_json: str | bytes, trace_context: str | None = None,
             resume: str | None = None, expires_at: float | None = None,
             threads: int | None = None, devices: dict[str, list[int]] | None = None
             ) -> bytes:
        """A RUN frame from its fields, without building the object (the parent's
        per-job path)."""
        if (trace_context is None and resume is None and expires_at is None and threads is None
                and devices is None):
            data = _dumps({"id": job_id, "kind": kind, "queue": queue, "attempt": attempt,
                           "max_attempts": max_attempts, "args": _Fragment(args_json)})
        else:
            body: dict[str, Any] = {"id": job_id, "kind": kind, "queue": queue,
                                    "attempt": attempt, "max_attempts": max_attempts}
            if trace_context is not None:
                body["trace"] = _Fragment(trace_context)
            if resume is not None:
                body["resume"] = _Fragment(resume)
            if expires_at is not None:
                body["expires"] = expires_at
            if threads is not None:  # a job that reserved several CPUs
                body["threads"] = threads
            if devices is not None:  # a job that holds counted resources
                body["devices"] = devices
            body["args"] = _Fragment(args_json)  # last: a bad one is split off (_split)
            data = _dumps(body)
        return _pack_header(VERSION, RUN, 0, len(data)) + data

    def encode(self) -> bytes:
        """This message as one frame (``args_json`` if set, else ``args`` encoded)."""
        args_json = self.args_json if self.args_json is not None else _dumps(self.args)
        trace = self.trace_context
        if trace is not None and not isinstance(trace, str):
            trace = _dumps(trace).decode()
        resume = None if self.resume is None else _dumps(self.resume).decode()
        return Run.pack(self.id, self.kind, self.queue, self.attempt, self.max_attempts,
                        args_json, trace, resume, self.expires_at, self.threads,
                        self.devices)

    @classmethod
    def decode(cls, frame: Frame) -> Run:
        """The job a RUN frame carries, with its args decoded if they can be."""
        try:
            body = _loads(frame.body)
            args_error = None
        except _JSONDecodeError as exc:
            body, args_error = cls._split(frame.body, exc)
        if not isinstance(body, dict):
            raise ProtocolError("RUN body is not a JSON object")
        try:
            return cls(body["id"], body["kind"], body["queue"], body["attempt"],
                       body["max_attempts"], None, body.get("args"), args_error,
                       body.get("trace"), body.get("resume"), body.get("expires"),
                       body.get("threads"), body.get("devices"))
        except KeyError as exc:
            raise _missing(RUN, exc) from None

    @staticmethod
    def _split(data: bytes, exc: Exception) -> tuple[dict[str, Any], str]:
        # The whole body did not parse: if the job's part does, only its args are bad.
        at = data.find(_ARGS_KEY)
        meta = None
        if at >= 0:
            try:
                meta = _loads(data[:at] + b"}")
            except _JSONDecodeError:
                meta = None
        if not isinstance(meta, dict):
            raise ProtocolError(f"RUN body is not JSON: {exc}") from None
        try:
            _loads(data[at + len(_ARGS_KEY):-1])
        except _JSONDecodeError as args_exc:
            exc = args_exc  # its position counts from the start of the args
        return meta, f"args cannot be decoded: {exc}"


@dataclass(slots=True)
class Heartbeat:
    """Still alive, running ``job``; ``progress`` is its latest report, if new."""

    TYPE: ClassVar[int] = HEARTBEAT
    job: int
    progress: dict[str, Any] | None = None

    def encode(self) -> bytes:
        """This message as one frame. Raises ``TypeError`` if progress cannot be
        encoded as JSON."""
        if self.progress is None:
            return encode(HEARTBEAT, {"job": self.job})
        return encode(HEARTBEAT, {"job": self.job, "progress": self.progress})

    @classmethod
    def decode(cls, frame: Frame) -> Heartbeat:
        """The message a HEARTBEAT frame carries."""
        body = _body(frame, HEARTBEAT)
        try:
            return cls(body["job"], body.get("progress"))
        except KeyError as exc:
            raise _missing(HEARTBEAT, exc) from None


class DoneBody(NamedTuple):
    """What a DONE frame carries, as the parent's per-job path reads it: the result
    stays JSON text for the store."""

    job: int
    result: str
    usage: Usage | None
    output: str | None


@dataclass(slots=True)
class Done:
    """``job`` returned; ``result`` is its value as JSON bytes, which the parent stores
    without decoding. ``last``: the child exits right after this answer. ``usage``: what
    the attempt cost; ``output``: the tail of what it printed (None: nothing)."""

    TYPE: ClassVar[int] = DONE
    job: int
    result: bytes
    last: bool = False
    usage: Usage | None = None
    output: str | None = None

    def encode(self) -> bytes:
        """This message as one frame."""
        return Done.pack(self.job, self.result, self.last, self.usage, self.output)

    @staticmethod
    def pack(job_id: int, result: bytes, last: bool = False, usage: Usage | None = None,
             output: str | None = None) -> bytes:
        """A DONE frame from its fields (the child's per-job path)."""
        flags = FLAG_LAST if last else 0
        head = _pack_id(job_id)
        if usage is not None:
            flags |= FLAG_USAGE
            head += usage.pack()
        if output:
            data = output.encode(errors="replace")
            flags |= FLAG_OUTPUT
            head += _LENGTH.pack(len(data)) + data
        return _pack_header(VERSION, DONE, flags, len(head) + len(result)) + head + result

    @classmethod
    def decode(cls, frame: Frame) -> Done:
        """The message a DONE frame carries."""
        body = Done.unpack(frame)
        return cls(body.job, body.result.encode(), bool(frame.flags & FLAG_LAST),
                   body.usage, body.output)

    @staticmethod
    def unpack(frame: Frame) -> DoneBody:
        """What a DONE frame carries, without building the message (the parent's
        per-job path: the result text goes to the store as it is)."""
        body = frame.body
        flags = frame.flags
        try:
            job_id = _unpack_id(body)[0]
            at = _ID_SIZE
            usage = output = None
            if flags & FLAG_USAGE:
                usage = Usage.unpack(body, at)
                at += _USAGE_SIZE
            if flags & FLAG_OUTPUT:
                size = _LENGTH.unpack_from(body, at)[0]
                at += _LENGTH_SIZE
                if at + size > len(body):
                    raise struct.error("output runs past the body")
                output = body[at:at + size].decode()
                at += size
            return DoneBody(job_id, body[at:].decode(), usage, output)
        except (struct.error, UnicodeDecodeError):
            raise ProtocolError("DONE body is not a job id, its usage and output, and "
                                "UTF-8 JSON text") from None


@dataclass(slots=True)
class Failed:
    """``job``'s attempt failed in the child: ``kind`` is one of ``shared.jobs.FAIL_*``;
    ``retry_delay`` is a handler's own choice for a ``Retry``. ``last``: the child exits
    right after this answer. ``usage`` and ``output`` as for ``Done``."""

    TYPE: ClassVar[int] = FAILED
    job: int
    kind: str
    message: str
    traceback: str | None = None
    retry_delay: float | None = None
    last: bool = False
    usage: Usage | None = None
    output: str | None = None

    def encode(self) -> bytes:
        """This message as one frame (``usage`` and ``output`` only when there)."""
        body: dict[str, Any] = {"job": self.job, "kind": self.kind, "message": self.message,
                                "traceback": self.traceback, "retry_delay": self.retry_delay}
        if self.usage is not None:
            body["usage"] = list(self.usage)
        if self.output:
            body["output"] = self.output
        return encode(FAILED, body, FLAG_LAST if self.last else 0)

    @classmethod
    def decode(cls, frame: Frame) -> Failed:
        """The message a FAILED frame carries."""
        body = _body(frame, FAILED)
        usage = body.get("usage")
        output = body.get("output")
        try:
            if usage is not None:
                usage = Usage(float(usage[0]), float(usage[1]), int(usage[2]))
            if output is not None and not isinstance(output, str):
                raise ProtocolError("FAILED output is not text")
            return cls(body["job"], body["kind"], body.get("message") or "",
                       body.get("traceback"), body.get("retry_delay"),
                       bool(frame.flags & FLAG_LAST), usage, output or None)
        except KeyError as exc:
            raise _missing(FAILED, exc) from None
        except (TypeError, ValueError, IndexError):
            raise ProtocolError("FAILED usage is not [cpu, wall, rss]") from None


def _id_frame(mtype: int, job_id: int) -> bytes:
    return _pack_header(VERSION, mtype, 0, _ID_SIZE) + _pack_id(job_id)


def _id_of(frame: Frame) -> int:
    if len(frame.body) != _ID_SIZE:
        raise ProtocolError(f"{TYPE_NAMES[frame.type]} body is not a job id")
    return _unpack_id(frame.body)[0]


@dataclass(slots=True)
class _JobIdMessage:
    """A message whose body is one job id as 8 bytes."""

    TYPE: ClassVar[int]
    job: int

    def encode(self) -> bytes:
        """This message as one frame."""
        return _id_frame(self.TYPE, self.job)

    @classmethod
    def decode(cls, frame: Frame) -> Any:
        """The message a frame of this type carries."""
        return cls(_id_of(frame))


@dataclass(slots=True)
class Start(_JobIdMessage):
    """The child takes ``job``, the next of its queue: its attempt counts from now and
    its deadlines are armed. ``pack``/``unpack``: the per-job path, without an object."""

    TYPE: ClassVar[int] = START

    @staticmethod
    def pack(job_id: int) -> bytes:
        """A START frame for ``job_id`` (the child's per-job path)."""
        return _id_frame(START, job_id)

    @staticmethod
    def unpack(frame: Frame) -> int:
        """The job id of a START frame (the parent's per-job path)."""
        return _id_of(frame)


@dataclass(slots=True)
class Skip(_JobIdMessage):
    """``job``, queued in the child, must not run (cancelled, lease lost, queue paused):
    dropped, it is answered SKIPPED; a child that had taken it already says START."""

    TYPE: ClassVar[int] = SKIP


@dataclass(slots=True)
class Skipped(_JobIdMessage):
    """The child dropped queued ``job`` as told: it never ran there (the parent gives a
    job back only on this, since a child may have taken it before the SKIP arrived)."""

    TYPE: ClassVar[int] = SKIPPED


@dataclass(slots=True)
class Stop:
    """Finish the running job, start no queued one, and exit."""

    TYPE: ClassVar[int] = STOP

    def encode(self) -> bytes:
        """This message as one frame (an empty body)."""
        return _STOP_FRAME

    @classmethod
    def decode(cls, frame: Frame) -> Stop:
        """The message a STOP frame carries (nothing)."""
        return cls()


_STOP_FRAME = encode(STOP)


@dataclass(slots=True)
class BootError:
    """The child could not boot (``kind``: boot or import) and exits right after."""

    TYPE: ClassVar[int] = BOOT_ERROR
    kind: str
    message: str

    def encode(self) -> bytes:
        """This message as one frame."""
        return encode(BOOT_ERROR, {"kind": self.kind, "message": self.message})

    @classmethod
    def decode(cls, frame: Frame) -> BootError:
        """The message a BOOT_ERROR frame carries."""
        body = _body(frame, BOOT_ERROR)
        return cls(str(body.get("kind")), str(body.get("message")))


Message = (Ready | Run | Start | Skip | Skipped | Heartbeat | Done | Failed | Stop | BootError
           | Checkpoint | Checkpointed | Stopping)

_CLASSES: dict[int, Any] = {cls.TYPE: cls for cls in Message.__args__}


def decode(frame: Frame) -> Message:
    """The typed message of any frame."""
    return _CLASSES[frame.type].decode(frame)
