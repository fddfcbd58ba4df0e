"""Handlers and hooks for the hook tests, loaded with ``--app hooks_handlers`` in a
``supervisor run`` of their own (hooks are process-wide: never imported by pytest).

Every hook appends one line to the file named by ``HOOKS_LOG``; ``HOOKS_FAIL`` names
the hooks that raise (``start``, ``exit``, ``enter``, ``leave``, ``discard``), and
``enter`` / ``leave`` fail only for jobs whose args say ``{"hook_fails": true}``.
"""

import os
from contextlib import contextmanager

import orjson

from workers import Discard, around_job, job, on_child_exit, on_child_start, on_discard

FAILS = set(filter(None, os.environ.get("HOOKS_FAIL", "").split(",")))


def record(event: str, **extra) -> None:
    line = orjson.dumps({"event": event, "pid": os.getpid(), **extra}) + b"\n"
    fd = os.open(os.environ["HOOKS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@on_child_start
def loaded() -> None:
    record("start")
    if "start" in FAILS:
        raise RuntimeError("the model file is missing")


@on_child_exit
def closing() -> None:
    record("exit")
    if "exit" in FAILS:
        raise RuntimeError("could not close the handle")


@around_job
@contextmanager
def outer(ctx):
    record("enter outer", job=ctx.id)
    if "enter" in FAILS and ctx.args.get("hook_fails"):
        raise RuntimeError("no GPU left")
    yield
    record("leave outer", job=ctx.id)
    if "leave" in FAILS and ctx.args.get("hook_fails"):
        raise RuntimeError("cleanup failed")


@around_job
@contextmanager
def inner(ctx):
    record("enter inner", job=ctx.id)
    try:
        yield
    finally:
        record("leave inner", job=ctx.id)


@on_discard
def dead_letter(ctx, errors) -> None:
    record("discard", job=ctx.id, attempt=ctx.attempt, kinds=[e["kind"] for e in errors])
    if "discard" in FAILS:
        raise RuntimeError("the dead-letter store is down")


@job
def hooked(hook_fails: bool = False, fail: str = "") -> str:
    from workers import current_job

    record("run", job=current_job().id, attempt=current_job().attempt)
    if fail == "raise":
        raise ValueError("bad pixel")
    if fail == "discard":
        raise Discard("not worth it")
    return "ok"
