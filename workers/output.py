"""A child's own stdout and stderr, captured and tagged with the job that wrote them.

Without this a handler's ``print()`` (and anything its subprocesses write) reaches the
supervisor's stderr raw, mixed unmarked into its log stream; with ``--log-format json``
a collector then meets lines that are not JSON. After boot the child points fds 1 and 2
at pipes of its own; a reader thread turns each line into one record on the stream the
child inherited (the supervisor's stderr), in the supervisor's format (``shared.logformat``):

- json: ``{"time", "level": "info", "logger": "supervisor.output", "message", "job_id",
  "kind", "stream"}``, one object per line;
- text: ``[job 42 resize stdout] the line``, control characters escaped.

The child writes these records itself (the parent never parses them): a line costs the
parent nothing, and a crash of the parent does not block a child that prints.

Lines belong to the job that was running when they were written: ``end`` (before the job
is answered) flushes Python's buffers and waits until the reader has taken everything in
the pipes, so the next job never inherits the tail of this one. Output after that (a
thread or subprocess the handler left behind) is tagged with the child's pid instead.
A record is kept under ``PIPE_BUF`` so a pipe never interleaves it with the parent's lines.

The log gets at most ``LOG_LIMIT`` bytes of each job's output (and as much again of
the output between jobs): a handler that prints 100 MB must not put 100 MB into the
supervisor's log. Past the limit the lines are read and counted, not written, and one
record at the job's end says how many bytes the log left out (the job keeps its own
tail, below, as before).

Besides tagging, the last ``keep`` bytes each job wrote (stdout and stderr as they
arrived, the setting ``output_capture``; 0: none) are kept for its answer: ``take``
hands them out once the job ended, None when it wrote nothing.
"""

from __future__ import annotations

import fcntl
import os
import select
import selectors
import struct
import sys
import termios
import threading
import time

from shared import logformat
from shared.validation import printable

CHUNK = 600  # characters per record: even fully escaped, a record stays under PIPE_BUF
DRAIN_LIMIT = 1.0  # seconds ``end`` waits for the reader (fd 1 or 2 may have been replaced)
PIPE_SIZE = 1 << 20  # room for a burst while the reader waits for the GIL
LOG_LIMIT = 64 * 1024  # bytes of one job's output written to the supervisor's log
_FIONREAD = struct.pack("i", 0)


class OutputCapture:
    """Owns fds 1 and 2 of the child and the thread that tags what arrives on them."""

    def __init__(self, fmt: str, keep: int = 0) -> None:
        self.json = fmt == "json"
        self.keep = keep  # bytes of each job's output kept for its answer
        self._tail = bytearray()
        self.target = os.dup(2)  # the supervisor's stderr: where records go
        self._job: tuple[int, str] | None = None
        self._job_wrote = False  # the reader took bytes since the last end()
        self._partial: dict[int, bytes] = {}
        self._names: dict[int, str] = {}
        self._logged = 0  # bytes of the current job's output written to the log
        self._left_out = 0  # bytes of it past LOG_LIMIT, read and dropped
        self._cond = threading.Condition()
        self._selector = selectors.PollSelector()  # no fd of its own, unlike epoll
        self._pending = select.poll()  # end()'s one-syscall look: anything unread?
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            try:
                fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass  # over /proc/sys/fs/pipe-max-size: the default size still works
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            self._names[r] = name
            self._partial[r] = b""
            self._selector.register(r, selectors.EVENT_READ)
            self._pending.register(r, select.POLLIN)
        threading.Thread(target=self._run, name="output", daemon=True).start()

    def begin(self, job_id: int, kind: str) -> None:
        """Lines from now on belong to this job."""
        self._tail.clear()  # an answer that never took its tail must not pass it on
        if self._logged or self._left_out:  # output between jobs: its own budget
            with self._cond:
                self._close_budget()
        self._job = (job_id, kind)

    def take(self) -> str | None:
        """The last ``keep`` bytes the job that just ended wrote, as text (None: it
        wrote nothing, or nothing is kept); called after ``end``."""
        tail = self._tail
        if not tail:
            return None
        keep = self.keep
        data = bytes(tail[-keep:]) if len(tail) > keep else bytes(tail)
        tail.clear()
        return data.decode(errors="replace")

    def end(self) -> None:
        """The job's handler returned: its output is written before its answer."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if not self._pending.poll(0) and not self._job_wrote:
            self._job = None  # the common case: nothing written, no lock, one syscall
            return
        deadline = None
        with self._cond:
            while any(_unread(r) for r in self._names):
                now = time.monotonic()
                deadline = deadline or now + DRAIN_LIMIT
                if now >= deadline or not self._cond.wait(deadline - now):
                    break
            for r in self._names:
                self._emit_partial(r)
            self._close_budget()
            self._job = None
            self._job_wrote = False

    def _run(self) -> None:
        while True:
            events = self._selector.select()
            with self._cond:
                for key, _ in events:
                    self._take(key.fd)
                self._cond.notify_all()

    def _take(self, r: int) -> None:
        # Set before the read empties the pipe, so end()'s fast path (pipes empty, flag
        # clear) can never pass while the reader holds bytes it has not tagged yet.
        self._job_wrote = True
        try:
            data = os.read(r, 65536)
        except BlockingIOError:
            return
        if not data:  # every writer gone: nothing more will come
            self._selector.unregister(r)
            self._emit_partial(r)
            return
        if self.keep and self._job is not None:
            tail = self._tail
            tail += data
            if len(tail) > 2 * self.keep:  # trimmed now and then, not at every read
                del tail[:-self.keep]
        lines = (self._partial[r] + data).split(b"\n")
        self._partial[r] = lines.pop()
        for line in lines:
            self._emit(self._names[r], line, ended=True)
        if len(self._partial[r]) > LOG_LIMIT:  # a line with no end: bounded all the same
            self._emit_partial(r)

    def _emit_partial(self, r: int) -> None:
        if self._partial[r]:
            line, self._partial[r] = self._partial[r], b""
            self._emit(self._names[r], line)

    def _emit(self, stream: str, raw: bytes, ended: bool = False) -> None:
        """Write one line (``ended``: it had its newline) within the log's budget."""
        size = len(raw) + ended
        room = LOG_LIMIT - self._logged
        if size > room:
            self._left_out += size - max(room, 0)
            if room <= 0:
                return
            raw = raw[:room]
            size = room
        self._logged += size
        text = raw.decode(errors="replace").removesuffix("\r")
        job = self._job
        for start in range(0, max(len(text), 1), CHUNK):
            try:
                os.write(self.target, self._record(stream, text[start:start + CHUNK], job))
            except OSError:
                return  # the supervisor's stderr is gone: nowhere to say it

    def _close_budget(self) -> None:
        """Say how much of the output that just ended the log left out, and start a
        fresh budget (called with the lock held)."""
        left_out, self._left_out, self._logged = self._left_out, 0, 0
        if left_out:
            kept = f"; the job keeps its last {self.keep} bytes" if self.keep else ""
            note = (f"... {left_out} more bytes of output not written to this log (at most "
                    f"{LOG_LIMIT} bytes of a job's output are{kept})")
            try:
                os.write(self.target, self._record("stderr", note, self._job))
            except OSError:
                pass

    def _record(self, stream: str, text: str, job: tuple[int, str] | None) -> bytes:
        if self.json:
            job_id, kind = job if job is not None else (None, None)
            return logformat.json_line("info", "supervisor.output", text, stream=stream,
                                       pid=os.getpid(), job_id=job_id, kind=kind) + b"\n"
        tag = f"job {job[0]} {printable(job[1])}" if job is not None else f"child {os.getpid()}"
        return f"[{tag} {stream}] {printable(text)}\n".encode(errors="replace")


def _unread(fd: int) -> int:
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, _FIONREAD))[0]
    except OSError:
        return 0


_capture: OutputCapture | None = None


def install(fmt: logformat.LogFormat | None = None, keep: int = 0) -> OutputCapture:
    """Capture this child's fds 1 and 2 (once); ``fmt`` None: as the parent logs
    (``shared.logformat``, inherited through the fork). ``keep``: bytes of each job's
    output kept for its answer (0: none)."""
    global _capture
    if _capture is None:
        _capture = OutputCapture(fmt or logformat.current_format(), keep)
    else:
        _capture.keep = keep
    return _capture


def finish() -> None:
    """At the child's exit: the last lines reach the log before the process is gone."""
    if _capture is not None:
        _capture.end()


def runtime_line(level: str, message: str, trace: str | None = None) -> None:
    """One message of the child runtime itself (not of a handler) on the supervisor's
    stderr, in its log format: JSON there must never meet a raw traceback."""
    if logformat.current_format() == "json":
        data = logformat.json_line(level, "supervisor.child", message, pid=os.getpid(),
                                   traceback=trace) + b"\n"
    else:
        data = (trace if trace is not None else message + "\n").encode(errors="replace")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(stderr_fd(), view):]
    except OSError:
        pass


def stderr_fd() -> int:
    """Where the runtime's own messages go: the supervisor's stderr, not the capture."""
    return _capture.target if _capture is not None else 2
