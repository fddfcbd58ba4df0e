"""Running one job in this process: from its RUN message to its answer.

Binding the args to the handler's signature, the ``current_job()`` context, the call
(with a soft timeout when a timer is given), the exceptions a handler steers its job
with (``Discard``, ``Retry``, ``Snooze``) and the checks on its result (JSON, finite
numbers, the size cap). The child's serve loop (``workers.child``) runs every job
through ``JobExecutor.run``; so does ``supervisor.testing``, which runs jobs in a test
process without a supervisor, so a job behaves the same in both.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import orjson

from shared import defaults, wire
from shared.jobs import (
    FAIL_ARGS,
    FAIL_BINDING,
    FAIL_DISCARD,
    FAIL_ERROR,
    FAIL_HOOK,
    FAIL_RESULT,
    FAIL_RETRY,
    FAIL_SNOOZE,
    FAIL_STOPPED,
    FAIL_UNKNOWN_KIND,
)
from workers import hooks
from workers.binding import ArgsChecker
from workers.context import JobContext, set_current
from workers.outcomes import Discard, Retry, Snooze, Stopping
from workers.registry import JobHandle, get_handler
from workers.results import non_finite
from workers.softtimer import SoftTimer
from workers.stopnotice import StopNotice
from workers.usage import UsageMeter


def _warn(message: str) -> None:
    from workers.output import runtime_line

    runtime_line("warning", message)


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: the type says what went wrong, and notes or
    further lines (kept in the traceback) must not stand in for the message."""
    name = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # a broken __str__ must not cost the answer
        lines = []
    return f"{name}: {lines[0].strip()}" if lines else name


class JobExecutor:
    """Runs jobs one at a time in the calling process and answers each with the
    ``wire.Done`` or ``wire.Failed`` its child would send.

    ``begin(context)`` is called once the job's context is installed, just before its
    handler runs, and ``end()`` once it returned or raised (the child starts and stops
    its heartbeat and output capture there). ``soft_timer``: soft timeouts are armed
    with it (None: none are). ``keep_exception``: the exception a failed handler raised
    is kept in ``raised`` (a test wants the original; the child does not keep it, which
    would hold its frames alive until the next failure). ``lookup``: the handler of a
    kind (the registry's, unless a test runs one handle). ``meter``: measures what each
    job whose handler ran cost (``usage`` of its answer; None: not measured).
    ``stop_notice``: how ``@job(on_stop="raise")`` handlers get ``Stopping`` (None: they
    only see the flag); ``send_checkpoint(job_id, state, flush)``: where
    ``current_job().checkpoint`` goes (None: it is kept on the context only)."""

    __slots__ = ("_checkers", "begin", "default_soft_timeout", "end", "keep_exception",
                 "lookup", "max_result_bytes", "meter", "raised", "send_checkpoint",
                 "soft_timer", "stop_notice")

    def __init__(self, *, max_result_bytes: int = defaults.MAX_RESULT_BYTES,
                 default_soft_timeout: float | None = None,
                 soft_timer: SoftTimer | None = None,
                 begin: Callable[[JobContext], None] | None = None,
                 end: Callable[[], None] | None = None,
                 keep_exception: bool = False,
                 lookup: Callable[[str], JobHandle | None] = get_handler,
                 meter: UsageMeter | None = None,
                 stop_notice: StopNotice | None = None,
                 send_checkpoint: Callable[[int, bytes, bool], None] | None = None) -> None:
        self.max_result_bytes = max_result_bytes
        self.meter = meter
        self.stop_notice = stop_notice
        self.send_checkpoint = send_checkpoint
        self.default_soft_timeout = default_soft_timeout
        self.soft_timer = soft_timer
        self.begin = begin
        self.end = end
        self.keep_exception = keep_exception
        self.lookup = lookup
        self.raised: BaseException | None = None
        self._checkers: dict[str, ArgsChecker] = {}

    def run(self, run: wire.Run) -> wire.Done | wire.Failed:
        """Run one job (inside any ``@around_job`` hooks); return its answer. A
        failure that discards the job calls the ``@on_discard`` hooks first."""
        answer = self._answer(run)
        if hooks.DISCARD and type(answer) is wire.Failed and hooks.is_final(
                answer.kind, run.attempt, run.max_attempts):
            self._discarded(run, answer)
        return answer

    def _discarded(self, run: wire.Run, answer: wire.Failed) -> None:
        context = JobContext(id=run.id, kind=run.kind, queue=run.queue, attempt=run.attempt,
                             args=run.args, max_attempts=run.max_attempts)
        errors: list[dict[str, Any]] = [{"attempt": run.attempt, "kind": answer.kind,
                                         "message": answer.message,
                                         "traceback": answer.traceback}]
        if answer.usage is not None:
            errors[0]["usage"] = answer.usage._asdict()
        set_current(context)
        try:
            hooks.run_discard(context, errors, _warn)
        finally:
            set_current(None)

    def told_discarded(self, told: wire.Discarded) -> None:
        """Run the ``@on_discard`` hooks for a job the parent discarded after the child
        that ran it died (``shared.discarded``)."""
        if not hooks.DISCARD:
            return
        context = JobContext(id=told.id, kind=told.kind, queue=told.queue,
                             attempt=told.attempt, args=told.args(),
                             max_attempts=told.max_attempts)
        set_current(context)
        try:
            hooks.run_discard(context, told.errors, _warn)
        finally:
            set_current(None)

    def _answer(self, run: wire.Run) -> wire.Done | wire.Failed:
        job_id = run.id
        kind = run.kind
        args = run.args
        if run.args_error is not None:
            return wire.Failed(job_id, FAIL_ARGS, run.args_error)
        handle = self.lookup(kind)
        if handle is None:
            return wire.Failed(job_id, FAIL_UNKNOWN_KIND,
                               f"no handler for kind {kind!r} in this worker")
        if not isinstance(args, dict):
            return wire.Failed(job_id, FAIL_BINDING,
                               f"args must be a JSON object, not {type(args).__name__}")
        checker = self._checkers.get(kind)
        if checker is None:
            checker = self._checkers[kind] = ArgsChecker(handle.signature)
        try:
            checker.check(args)
        except TypeError as exc:
            if self.keep_exception:
                self.raised = exc
            return wire.Failed(job_id, FAIL_BINDING,
                               f"args do not fit {kind}{handle.signature}: {exc}")
        context = JobContext(id=job_id, kind=kind, queue=run.queue, attempt=run.attempt,
                             args=args, max_attempts=run.max_attempts, resume=run.resume,
                             devices=run.devices, _checkpoint_cap=self.max_result_bytes)
        send = self.send_checkpoint
        if send is not None:
            context._send_checkpoint = lambda data, flush: send(job_id, data, flush)
        set_current(context)
        if self.begin is not None:
            self.begin(context)
        meter = self.meter
        if meter is None:
            return self._call(run, handle, context)
        meter.start()
        answer = self._call(run, handle, context, meter)
        answer.usage = meter.usage
        return answer

    def _call(self, run: wire.Run, handle: JobHandle, context: JobContext,
              meter: UsageMeter | None = None) -> wire.Done | wire.Failed:
        """Call the handler (inside any ``@around_job`` hooks) and answer for it."""
        job_id = run.id
        args = context.args
        soft = handle.defaults.soft_timeout
        if soft is None:
            soft = self.default_soft_timeout
        timer = self.soft_timer
        notice = self.stop_notice if handle.defaults.on_stop == "raise" else None
        try:
            if notice is not None:
                def invoke() -> Any:
                    return notice.call(context, lambda: (
                        timer.call(soft, handle.func, args) if soft and timer is not None
                        else handle.func(**args)))
                result = hooks.call_around(context, invoke) if hooks.AROUND_JOB else invoke()
            elif hooks.AROUND_JOB:
                result = hooks.call_around(context, lambda: (
                    timer.call(soft, handle.func, args) if soft and timer is not None
                    else handle.func(**args)))
            else:
                result = (timer.call(soft, handle.func, args) if soft and timer is not None
                          else handle.func(**args))
        except hooks.HookFailed as exc:
            self._keep(exc.cause)
            return wire.Failed(job_id, FAIL_HOOK, f"{exc}: {one_line(exc.cause)}",
                               "".join(traceback.format_exception(exc.cause)))
        except Discard as exc:
            self._keep(exc)
            return wire.Failed(job_id, FAIL_DISCARD, exc.reason, traceback.format_exc())
        except Retry as exc:
            self._keep(exc)
            return wire.Failed(job_id, FAIL_RETRY, exc.reason, None, exc.delay)
        except Snooze as exc:
            self._keep(exc)
            return wire.Failed(job_id, FAIL_SNOOZE, str(exc), None, exc.delay)
        except Stopping as exc:
            # The parent decides what it means: handed back after its own notice, an
            # ordinary error without one.
            self._keep(exc)
            return wire.Failed(job_id, FAIL_STOPPED, one_line(exc), traceback.format_exc())
        except BaseException as exc:
            self._keep(exc)
            return wire.Failed(job_id, FAIL_ERROR, one_line(exc), traceback.format_exc())
        finally:
            if meter is not None:
                meter.stop()
            set_current(None)
            if self.end is not None:
                self.end()
        return self.encode_result(job_id, result)

    def _keep(self, exc: BaseException) -> None:
        if self.keep_exception:
            self.raised = exc

    def encode_result(self, job_id: int, result: Any) -> wire.Done | wire.Failed:
        """``result`` as the JSON a DONE carries, or the ``result`` failure that a value
        which is not JSON, not finite or over the size cap gets."""
        try:
            data = orjson.dumps(result)
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
            return wire.Failed(job_id, FAIL_RESULT,
                               f"result is not JSON-serializable: {exc}")
        # orjson writes NaN and infinities as null; a result that silently changed is
        # worse than a failed job. Only a float can be one, so most results skip the walk.
        if result is not None and b"null" in data:
            problem = non_finite(result)
            if problem is not None:
                return wire.Failed(job_id, FAIL_RESULT,
                                   f"result is not valid JSON: {problem} is not a finite number")
        limit = self.max_result_bytes
        if len(data) > limit:
            return wire.Failed(job_id, FAIL_RESULT,
                               f"result is {len(data)} bytes of JSON, over the {limit}-byte limit")
        return wire.Done(job_id, data)
