"""Args enqueued through a handler's handle are bound to its signature at once, not
discarded at run time; ``enqueue("kind", ...)`` without the handler is unchanged; an
``async def`` handler is refused at import in one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from e2e import ROOT

from shared.enqueue import enqueue
from workers import ArgsDoNotFit, job

pytestmark = pytest.mark.timeout(60)


@job(queue="nu_binding")
def nu_resize(path: str, width: int, height: int | None = None) -> None:
    """A handler that needs ``width``."""


SIGNATURE = "nu_resize(path: 'str', width: 'int', height: 'int | None' = None) -> 'None'"
MISSING = f"args do not fit {SIGNATURE}: missing a required argument: 'width'"
EXTRA = f"args do not fit {SIGNATURE}: got an unexpected keyword argument 'colour'"


def count(conn) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = 'nu_resize'"
                        ).fetchone()[0]


def test_every_handle_path_checks_the_args_before_inserting(conn):
    calls = [
        (lambda: nu_resize.options(conn=conn).enqueue(path="a.png"), MISSING),
        (lambda: nu_resize.options(conn=conn, priority=5).enqueue(path="a", width=1,
                                                                  colour="red"), EXTRA),
        (lambda: nu_resize.options(conn=conn).enqueue_many(
            [{"path": "a", "width": 1}, {"path": "b"}]), f"args_list[1]: {MISSING}"),
        (lambda: nu_resize.options(conn=conn).enqueue_many(
            [{"path": "a", "width": 1}], then=nu_resize.bind(path="done")), MISSING),
        (lambda: asyncio.run(nu_resize.enqueue_async(path="a.png")), MISSING),
        (lambda: asyncio.run(nu_resize.enqueue_many_async([{"path": "a"}])),
         f"args_list[0]: {MISSING}"),
    ]
    for call, message in calls:
        with pytest.raises(ArgsDoNotFit) as caught:
            call()
        assert str(caught.value) == message
        assert isinstance(caught.value, TypeError)
    assert count(conn) == 0


def test_plain_handle_enqueue_checks_too(dsn, monkeypatch):
    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    with pytest.raises(ArgsDoNotFit, match="^" + MISSING.replace("(", r"\(").replace(")", r"\)")
                       .replace("|", r"\|") + "$"):
        nu_resize.enqueue(path="a.png")
    assert nu_resize.enqueue(path="a.png", width=100) > 0


def test_args_that_fit_are_enqueued_and_by_kind_nothing_is_checked(conn):
    ids = nu_resize.options(conn=conn).enqueue_many([{"path": "a", "width": 1},
                                                     {"path": "b", "width": 2, "height": 3}])
    assert len(ids) == 2
    enqueue("nu_resize", {"path": "a.png"}, conn=conn)  # no handler here: the child decides
    assert count(conn) == 3


ASYNC_APP = '''from workers import job


@job
async def fetch_page(url):
    return url
'''
ASYNC_LINE = ("@job fetch_page: handlers run synchronously in a child process, so an "
              "'async def' one is refused; write a plain 'def' (use asyncio.run(...) inside "
              "it to call async code)")


def test_an_async_handler_is_refused_at_import(tmp_path):
    with pytest.raises(TypeError) as caught:
        @job(name="nu_async")
        async def nu_async() -> None:
            pass
    assert str(caught.value) == ASYNC_LINE.replace("fetch_page", "nu_async")
    (tmp_path / "asyncapp.py").write_text(ASYNC_APP)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "asyncapp",
                           "--dsn", "postgresql://127.0.0.1:1/x"], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path), timeout=30)
    assert proc.returncode == 1
    assert proc.stderr == (f"supervisor: error: cannot import --app asyncapp: asyncapp.py "
                           f"line 4: TypeError: {ASYNC_LINE}\n")
