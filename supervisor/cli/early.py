"""What the ``supervisor`` command does before anything heavy is imported.

Importing the CLI (click, psycopg, the engine) takes a third of a second or more on a
busy machine. Two things cannot wait that long:

* a stop signal: as PID 1 in a container a SIGTERM that arrives before a handler exists
  is dropped by the kernel, so ``run`` starts recording stop signals here
  (``supervisor.signals.record_early``);
* a password given with ``--dsn``: ``ps`` shows every user the command line, so the
  process title is rewritten at once with the password replaced by ``***``. Python's
  ``sys.argv`` (a copy) keeps the real value for click. What remains is the instant
  between ``exec`` and this module: pass secrets through ``SUPERVISOR_DSN`` or
  ``~/.pgpass`` instead, which no other user can read.

And two things make the start-up cheaper (issue 31): the cyclic collector is off while
``run`` imports, and psycopg's version modules make no metadata lookup
(``supervisor.cli.versions``).
"""

from __future__ import annotations

import gc
import os
import sys

_RUN_COMMANDS = ("run",)


def is_supervisor_command(argv: list[str]) -> bool:
    """Whether ``argv`` is this process's own command line as the ``supervisor`` script
    or ``python -m supervisor`` (not, say, pytest importing the CLI)."""
    if not argv:
        return False
    program = argv[0]
    return (os.path.basename(program) == "supervisor"
            or program.endswith(os.path.join("supervisor", "__main__.py")))


def prepare(argv: list[str] | None = None) -> None:
    """Record stop signals early for ``supervisor run``; hide DSN passwords from ``ps``."""
    argv = sys.argv if argv is None else argv
    if not is_supervisor_command(argv):
        return
    if argv[1:2] and argv[1] in _RUN_COMMANDS:
        from supervisor.signals import record_early

        record_early()
        # Importing (psycopg, click, the engine, the handler modules) allocates many
        # objects and few cycles: the collector's passes meanwhile are start-up time
        # for nothing. ``run_supervisor`` turns it back on once the imports are done,
        # before anything forks (and each child turns it on for itself anyway).
        gc.disable()
    hide_passwords(argv)
    from supervisor.cli.versions import PSYCOPG, known_versions

    known_versions(PSYCOPG)


def hide_passwords(argv: list[str]) -> bool:
    """Rewrite the process title so no argument shows a DSN password; returns whether
    anything had to be hidden."""
    if not any("@" in arg or ":/" in arg or "password" in arg.lower() for arg in argv):
        return False
    from shared.dsn import redact_text

    shown = [_hide(arg, redact_text) for arg in argv]
    if shown == argv:
        return False
    try:
        from setproctitle import setproctitle
    except ImportError:  # pragma: no cover - a declared dependency
        return False
    setproctitle(" ".join(shown))
    return True


def _hide(arg: str, redact_text) -> str:
    # ``--dsn=postgresql://...``: the value starts after the '='.
    if arg.startswith("--") and "=" in arg:
        option, value = arg.split("=", 1)
        return f"{option}={redact_text(value)}"
    return redact_text(arg)
