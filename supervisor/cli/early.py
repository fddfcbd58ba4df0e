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

And one thing makes the start-up cheaper (issue 31): psycopg and psycopg-binary each
read their own version through ``importlib.metadata`` when imported (a scan of every
``sys.path`` entry, and the import of ``importlib.metadata`` with email, zipfile and csv:
about 25 ms of CPU, a tenth of ``supervisor run``'s start). ``known_versions`` gives
them the version their installed ``.dist-info`` directory is named for instead, when
their version module is the one-liner that asks for nothing else.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import types

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
    known_versions(_VERSION_MODULES)


# The version modules of the distributions the CLI imports at once, and the package whose
# dist-info names its version: (version module, distribution's directory prefix).
_VERSION_MODULES = (("psycopg", "psycopg-"), ("psycopg_binary", "psycopg_binary-"))
# All a version module may hold for ours to stand in for it (docstring and comments
# aside): psycopg's and psycopg-binary's, 3.1 to 3.3.
_VERSION_SOURCE = re.compile(
    r"from importlib import metadata\ntry:\n"
    r" +__version__ = metadata\.version\(\"[\w.-]+\"\)\n"
    r"except metadata\.PackageNotFoundError:\n"
    r" +__version__ = \"[\d.]+\"")


def known_versions(packages: tuple[tuple[str, str], ...]) -> list[str]:
    """Put ``<package>.version`` modules in ``sys.modules`` carrying the version of
    each package's ``.dist-info`` directory beside it, so importing the package makes no
    metadata lookup. A package already imported, not found as a plain directory, with
    other than one dist-info, or whose ``version.py`` does more than read its version,
    is left alone (it reads its version itself). Returns the modules put in place."""
    placed = []
    for package, prefix in packages:
        name = f"{package}.version"
        if package in sys.modules or name in sys.modules:
            continue
        version = _dist_info_version(package, prefix)
        if version is None:
            continue
        module = types.ModuleType(name, f"{package}'s version, read from its dist-info "
                                        "directory's name (supervisor.cli.early)")
        module.__version__ = version  # type: ignore[attr-defined]
        sys.modules[name] = module
        placed.append(name)
    return placed


def _dist_info_version(package: str, prefix: str) -> str | None:
    for entry in sys.path:
        directory = os.path.join(entry or ".", package)
        if not os.path.isfile(os.path.join(directory, "__init__.py")):
            continue
        try:
            with open(os.path.join(directory, "version.py"), encoding="utf-8") as file:
                text = file.read()
            infos = [n for n in os.listdir(entry or ".")
                     if n.startswith(prefix) and n.endswith(".dist-info")]
        except OSError:
            return None
        if len(infos) != 1 or not _VERSION_SOURCE.fullmatch(_code_of(text)):
            return None
        return infos[0][len(prefix):-len(".dist-info")]
    return None


def _code_of(text: str) -> str:
    """``text``'s lines without its docstring, comments and blank lines."""
    if text.lstrip().startswith('"""'):
        text = text.split('"""', 2)[-1]
    return "\n".join(line for line in text.splitlines()
                     if line.strip() and not line.lstrip().startswith("#"))


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
