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
            raise AppImportError(
                f"cannot import --app {name}: {type(exc).__name__}: {exc}") from None


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
