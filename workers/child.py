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
from functools import partial
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
from workers import devices, hooks, nativethreads, output, tracing
from workers.boot import ParentGone, current_rss, prepare_child
from workers.childscope import KEEPER
from workers.context import JobContext
from workers.execution import JobExecutor, one_line
from workers.heartbeat import Heartbeat
from workers.inbox import JobInbox
from workers.jobpipe import JobPipe
from workers.reaper import reap_leftovers
from workers.registry import get_handler
from workers.shm import ShmJanitor
from workers.softtimer import SoftTimer
from workers.stopnotice import StopNotice
from workers.usage import UsageMeter


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
    output_capture: int = defaults.OUTPUT_CAPTURE  # bytes of each job's output kept; 0: none


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
        with KEEPER.scope():  # what the hooks start is the child's, not its first job's
            hooks.run_child_start()  # a model loaded once per child, a reseed, ...
    except BaseException as exc:
        _report_boot_error(config, "on_child_start", exc)
        return CHILD_BOOT_ERROR
    runner = JobRunner(config)
    code = runner.serve()
    hooks.run_child_exit(_say)
    runner.finish()
    return code


def _print_to_stderr(exc: BaseException) -> None:
    # Straight to the fd (output.runtime_line): sys.stderr may wrap an fd the boot has
    # just closed (pytest's capture file, a log handler's stream).
    output.runtime_line("error", f"supervisor child {os.getpid()}: {one_line(exc)}",
                        "".join(traceback.format_exception(exc)))


def _skim(pipe: JobPipe, inbox: JobInbox) -> bytes:
    """The heartbeat thread's look at the pipe while a long job runs (``JobInbox.skim``),
    only while the read end is still the one the child was given."""
    if not pipe.intact()[0]:
        raise OSError("the handler closed or replaced the job pipe")
    return inbox.skim()


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
        self.stop_notice = StopNotice()
        self.output = output.install(keep=config.output_capture)
        self.meter = UsageMeter(_say)
        self.shm = ShmJanitor()
        self.executor = JobExecutor(max_result_bytes=config.max_result_bytes,
                                    default_soft_timeout=config.default_soft_timeout,
                                    soft_timer=self.soft_timer, begin=self._begin,
                                    end=self.output.end, meter=self.meter,
                                    stop_notice=self.stop_notice,
                                    send_checkpoint=self._send_checkpoint)
        self.run_job = self.executor.run
        self.inbox = JobInbox(self.pipe.read_fd, config.max_frame_bytes)
        self.inbox.on_stopping = self._on_stopping
        self.inbox.on_checkpointed = self._on_checkpointed
        self.heartbeat.listen = self._listen
        # The job whose START was written last, and a notice for it read before its
        # handler began (the heartbeat thread may read one in that moment): applied at
        # its begin. A notice for any other job is for one that already ended: dropped
        # (kept, it could stop a later run of the same job in this child).
        self._starting: int | None = None
        self._early_stop: str | None = None
        self._acked: set[int] = set()  # flushed checkpoints the parent says are written

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
        inbox = self.inbox
        self.heartbeat.watch = partial(_skim, pipe, inbox)
        lock = self.heartbeat.lock
        heartbeat = self.heartbeat
        write_fd = pipe.write_fd
        limited = config.max_jobs is not None or config.max_memory is not None
        run_job = tracing.traced(self.run_job)  # itself unless the otel extra is on
        pack_start = wire.Start.pack
        take_output = self.output.take if config.output_capture else None
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
            if inbox.has_discarded:  # between jobs: the last one's answer goes first
                if answer:
                    with lock:
                        heartbeat.end()
                        wire.write_all(write_fd, answer)
                    answer = b""
                for told in inbox.take_discarded():
                    self.executor.told_discarded(told)
            run = inbox.next_run()
            # The last answer, then any jobs dropped as told, then the next START: in
            # that order, so the parent always reads them about the head of its queue.
            data = answer + inbox.take_dropped()
            if run is not None:
                data += pack_start(run.id)
                self._starting = run.id
                self._early_stop = None
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
            if run.devices is None:
                result = run_job(run)
            else:  # counted resources: a GPU job sees its devices, and only while it runs
                before = devices.expose(run.devices)
                try:
                    result = run_job(run)
                finally:
                    devices.restore(before)
            if take_output is not None:
                result.output = take_output()
            if pipe.detached:
                os._exit(CHILD_OK)  # a copy its handler forked: it never answers
            # A job the meter measured says whether any process was under this one as
            # its handler returned; none (nearly every job) leaves nothing to reap.
            none_left = result.usage is not None and not self.meter.saw_descendants
            if self._reap_job_leftovers(none_left):  # nothing it started outlives it
                self.shm.after_reap()  # nor what those processes left in /dev/shm
                self.meter.rebase()
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

    def _reap_job_leftovers(self, none_left: bool) -> int:
        """Kill what the job left running, sparing what belongs to the child.
        ``none_left``: no process was under this one as the handler returned."""
        if KEEPER.retire_job_pools():
            self.shm.settle()  # the next job finds none of its semaphores in /dev/shm
        elif none_left:
            return 0
        if not KEEPER.holds():
            return reap_leftovers(self.shm.before_reap)
        return reap_leftovers(partial(self.shm.before_reap, keeping=True), KEEPER.spare)

    def finish(self) -> None:
        """The child is about to exit: end what ``on_child_exit`` hooks started, and
        remove what its processes left in /dev/shm."""
        reap_leftovers(self.shm.before_reap)
        self.shm.after_reap()
        self.shm.at_exit()

    def _should_recycle(self) -> bool:
        config = self.config
        if config.max_jobs is not None and self.jobs_done >= config.max_jobs:
            return True
        return config.max_memory is not None and current_rss() > config.max_memory

    def _begin(self, context: JobContext) -> None:
        """A job's handler is about to run: beat for it, and tag its output."""
        if self._early_stop is not None:
            if context.id == self._starting:
                context.stop_reason = self._early_stop
            self._early_stop = None
        self.heartbeat.begin(context.id, context)  # its thread also sets the title
        self.output.begin(context.id, context.kind)

    # -- checkpoints and stop notices (issue 28) -------------------------------------
    def _listen(self) -> None:
        """The heartbeat thread's look at the pipe while a job runs (not once its
        handler closed or replaced the read end: that fd may be the handler's now)."""
        if self.pipe.intact()[0]:
            self.inbox.look()

    def _on_stopping(self, notice: wire.Stopping) -> None:
        current = self.heartbeat.current
        if current is None or current[0] != notice.job:
            if notice.job == self._starting:
                self._early_stop = notice.reason
            return
        context = current[1]
        if context.stop_reason is not None:
            return
        handle = get_handler(context.kind)
        raising = handle is not None and handle.defaults.on_stop == "raise"
        self.stop_notice.noticed(context, notice.reason, raising)

    def _on_checkpointed(self, ack: wire.Checkpointed) -> None:
        self._acked.add(ack.job)

    def _send_checkpoint(self, job_id: int, state: bytes, flush: bool) -> None:
        """A handler's checkpoint to the parent; with ``flush``, wait until it is written
        (the main thread reads the pipe itself meanwhile). Shielded: a stop notice
        cannot tear the frame or drop what was read; it is raised after."""
        with self.stop_notice.shielded():
            self._acked.discard(job_id)
            self.heartbeat.write(wire.Checkpoint(job_id, state, flush).encode())
            if not flush:
                return
            inbox = self.inbox
            while (job_id not in self._acked and not inbox.closed
                   and self.pipe.intact()[0]):
                inbox.wait_readable(0.1)
                inbox.poll()
            self._acked.discard(job_id)
