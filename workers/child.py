"""The child runtime: what a forked worker runs from fork to ``os._exit``.

``child_main`` boots the child (``workers.boot.prepare_child``), imports any modules it
was told to, says READY and then runs the jobs its parent queues in its pipe, one after
another, until STOP, end of file, or its recycle limit. It never returns: every way out
is ``os._exit`` with a code from ``shared.exitcodes``, so no ``atexit`` hook, ``finally``
block or buffered output of the parent's stack runs twice.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from typing import NoReturn

from shared import defaults, wire
from shared.exitcodes import (
    CHILD_BOOT_ERROR,
    CHILD_IMPORT_ERROR,
    CHILD_OK,
    CHILD_PARENT_GONE,
    CHILD_PIPE_LOST,
    CHILD_RECYCLE,
)
from workers import hooks, nativethreads, output, tracing
from workers.boot import ParentGone, current_rss, prepare_child
from workers.context import JobContext
from workers.execution import JobExecutor, one_line
from workers.heartbeat import Heartbeat
from workers.inbox import JobInbox
from workers.jobpipe import JobPipe
from workers.reaper import reap_leftovers
from workers.softtimer import SoftTimer


@dataclass(frozen=True, slots=True)
class ChildConfig:
    """Everything a child needs from its parent, fixed at fork time."""

    worker_no: int
    parent_pid: int
    read_fd: int  # RUN and STOP arrive here
    write_fd: int  # READY, HEARTBEAT, DONE, FAILED go out here
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL
    max_jobs: int | None = None  # already jittered by the parent
    max_memory: int | None = None  # bytes of RSS, checked between jobs
    max_result_bytes: int = defaults.MAX_RESULT_BYTES
    max_frame_bytes: int = wire.DEFAULT_MAX_BODY
    imports: tuple[str, ...] = ()  # modules to import after boot (normally already loaded)
    default_soft_timeout: float | None = None  # for kinds whose @job sets none; 0: none
    native_threads: int | None = None  # threads per native pool (BLAS, OpenMP); None: as is


def child_main(config: ChildConfig) -> NoReturn:
    """Run a child from just after ``fork`` until it exits. Never returns."""
    code = CHILD_BOOT_ERROR
    try:
        code = _boot_and_serve(config)
    except BaseException as exc:
        _print_to_stderr(exc)
        code = CHILD_BOOT_ERROR
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        output.finish()
        tracing.finish()  # spans still buffered (os._exit skips the SDK's exit hook)
        os._exit(code)


def _boot_and_serve(config: ChildConfig) -> int:
    try:
        prepare_child(config.worker_no, config.parent_pid, {config.read_fd, config.write_fd})
    except ParentGone:
        return CHILD_PARENT_GONE
    except Exception as exc:
        _report_boot_error(config, "boot", exc)
        return CHILD_BOOT_ERROR
    if config.native_threads is not None:
        # Before anything runs here: pools loaded later read the variables it sets.
        nativethreads.limit(config.native_threads)
    for module in config.imports:
        try:
            importlib.import_module(module)
        except BaseException as exc:
            _report_boot_error(config, "import", exc)
            return CHILD_IMPORT_ERROR
    try:
        hooks.run_child_start()  # a model loaded once per child, a reseed, ...
    except BaseException as exc:
        _report_boot_error(config, "on_child_start", exc)
        return CHILD_BOOT_ERROR
    code = JobRunner(config).serve()
    hooks.run_child_exit(_say)
    return code


def _print_to_stderr(exc: BaseException) -> None:
    # Straight to the fd (output.runtime_line): sys.stderr may wrap an fd the boot has
    # just closed (pytest's capture file, a log handler's stream).
    output.runtime_line("error", f"supervisor child {os.getpid()}: {one_line(exc)}",
                        "".join(traceback.format_exception(exc)))


def _say(message: str) -> None:
    output.runtime_line("warning", f"supervisor child {os.getpid()}: {message}")


def _report_boot_error(config: ChildConfig, kind: str, exc: BaseException) -> None:
    _print_to_stderr(exc)
    message = one_line(exc)
    try:
        wire.write_all(config.write_fd, wire.BootError(kind, message).encode())
    except OSError:
        pass  # the exit code still tells the parent what happened


class JobRunner:
    """The child's serve loop: queued RUNs in, START then DONE or FAILED out for each."""

    def __init__(self, config: ChildConfig) -> None:
        self.config = config
        self.jobs_done = 0
        self.pipe = JobPipe(config.read_fd, config.write_fd)
        self.heartbeat = Heartbeat(self.pipe, config.heartbeat_interval, config.worker_no)
        self.soft_timer = SoftTimer()
        self.output = output.install()
        self.executor = JobExecutor(max_result_bytes=config.max_result_bytes,
                                    default_soft_timeout=config.default_soft_timeout,
                                    soft_timer=self.soft_timer, begin=self._begin,
                                    end=self.output.end)
        self.run_job = self.executor.run

    def serve(self) -> int:
        """Say READY, then run the jobs the parent queues, back to back, until told to
        stop. Returns the exit code.

        Each job is announced with START before its handler runs, in the same write
        as the previous job's answer when the next job was already queued: the parent
        arms the job's deadlines and records its start from that. Before each start
        the pipe is read without blocking, so a STOP or SKIP behind the queued jobs is
        seen first; told STOP, the child starts nothing more and its queued jobs go
        back to the parent's pool unstarted."""
        config = self.config
        pipe = self.pipe
        pipe.guard_forks()
        self.heartbeat.start()
        self.heartbeat.write(wire.Ready(os.getpid(), config.worker_no).encode())
        inbox = JobInbox(pipe.read_fd, config.max_frame_bytes)
        lock = self.heartbeat.lock
        heartbeat = self.heartbeat
        write_fd = pipe.write_fd
        limited = config.max_jobs is not None or config.max_memory is not None
        run_job = tracing.traced(self.run_job)  # itself unless the otel extra is on
        pack_start = wire.Start.pack
        native = config.native_threads  # the child's own share, restored after each job
        answer = b""  # the last job's answer, written with the next job's START
        while True:
            try:
                if answer:
                    inbox.poll()
                else:
                    inbox.wait()
            except OSError:
                return CHILD_PIPE_LOST
            run = inbox.next_run()
            # The last answer, then any jobs dropped as told, then the next START: in
            # that order, so the parent always reads them about the head of its queue.
            data = answer + inbox.take_dropped()
            if run is not None:
                data += pack_start(run.id)
            if data:
                with lock:
                    heartbeat.end()
                    wire.write_all(write_fd, data)
                answer = b""
            if run is None:
                if inbox.stopped or inbox.closed:
                    return CHILD_OK
                continue
            if native is not None:  # a job that reserved several CPUs: their share
                nativethreads.resize(run.threads or native)
            result = run_job(run)
            if pipe.detached:
                os._exit(CHILD_OK)  # a copy its handler forked: it never answers
            reap_leftovers()  # nothing its handler started outlives the job
            self.jobs_done += 1
            read_ok, write_ok = pipe.intact()
            if not write_ok:
                _say("the handler closed or replaced the pipe to the parent; "
                     "its job cannot be answered")
                return CHILD_PIPE_LOST
            if not read_ok or (limited and self._should_recycle()):
                result.last = True
                with lock:
                    heartbeat.end()
                    wire.write_all(write_fd, result.encode())
                return CHILD_RECYCLE if read_ok else CHILD_PIPE_LOST
            answer = result.encode()

    def _should_recycle(self) -> bool:
        config = self.config
        if config.max_jobs is not None and self.jobs_done >= config.max_jobs:
            return True
        return config.max_memory is not None and current_rss() > config.max_memory

    def _begin(self, context: JobContext) -> None:
        """A job's handler is about to run: beat for it, and tag its output."""
        self.heartbeat.begin(context.id, context)  # its thread also sets the title
        self.output.begin(context.id, context.kind)
