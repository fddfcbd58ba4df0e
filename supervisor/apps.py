"""Importing the handler modules named by ``--app`` (and reloading them on SIGHUP)."""

from __future__ import annotations

import importlib
import logging
import os
import sys

log = logging.getLogger("supervisor.apps")


class AppImportError(RuntimeError):
    """An ``--app`` module failed to import; the message is one line."""


def import_apps(modules: list[str]) -> None:
    """Import each module so its ``@job`` handlers register, before any child forks.

    The working directory goes on ``sys.path`` first, as ``python -m`` would do, so
    ``--app mypipeline`` finds ``./mypipeline.py``.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any error in user code is reported, not raised
            where = failure_site(exc)
            text = exc.msg if isinstance(exc, SyntaxError) else str(exc).strip()
            text = text.splitlines()[0] if text else ""
            raise AppImportError(f"cannot import --app {name}: {where}"
                                 f"{type(exc).__name__}: {text}".rstrip(": ")) from None


def failure_site(exc: BaseException) -> str:
    """``path line N: `` of the application code where ``exc`` was raised (the deepest
    frame outside Python's own library, installed packages and this one; a SyntaxError's own
    file and line), relative to the working directory when under it; "" if unknown."""
    import sysconfig
    import traceback

    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        filename, line = exc.filename, exc.lineno
    else:
        ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        library = tuple(p for p in {sysconfig.get_paths()[k] for k in
                                    ("stdlib", "platstdlib", "purelib", "platlib")} if p)
        library += tuple(os.path.join(ours, package, "") for package in
                         ("shared", "supervisor", "workers"))
        # The first frame is import_apps' own; a module that is not found has no other.
        own = [f for f in traceback.extract_tb(exc.__traceback__)[1:]
               if not f.filename.startswith("<")
               and not os.path.abspath(f.filename).startswith(library)]
        if not own:
            return ""
        filename, line = own[-1].filename, own[-1].lineno or 0
    try:
        shown = os.path.relpath(filename)
        if shown.startswith(".."):
            shown = filename
    except ValueError:
        shown = filename
    return f"{shown} line {line}: "


def reload_apps(modules: list[str]) -> bool:
    """Reload the modules in place (SIGHUP). On an error the old code stays and
    False is returned, so a broken deploy never replaces working children."""
    try:
        for name in modules:
            importlib.reload(sys.modules[name])
    except Exception as exc:  # user code again: keep serving with what we have
        log.error("SIGHUP: reloading %s failed (%s: %s); keeping the running code",
                  ",".join(modules), type(exc).__name__, exc)
        return False
    return True
