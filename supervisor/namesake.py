"""Refusing to run beside supervisord, which has the same import name.

pg-supervisor's import package is ``supervisor``, and so is supervisord's (the PyPI
distribution ``supervisor``). pip installs both into one ``supervisor/`` directory
without a word (``pip check`` is silent too), and the one installed last owns
``supervisor/__init__.py``. supervisord's is a comment only, so with it
``supervisor.enqueue`` raises AttributeError while the CLI still starts. Uninstalling
either one then deletes the ``__init__.py`` both listed.

What can be seen from here, and what it costs:

* supervisord's own modules (``supervisord.py``, ``supervisorctl.py``, ``xmlrpc.py``) in
  our package directory: a stat each, cheap enough for every ``import supervisor``;
* a ``supervisor/__init__.py`` without our marker: the package imported is not ours;
* the ``supervisor`` distribution claiming files in our package directory: its
  ``*.dist-info/RECORD``, found with a directory listing of each ``sys.path`` entry
  (only ``supervisor run`` pays it). Not through ``importlib.metadata``: importing it
  (with email, zipfile and csv) cost about 25 ms of CPU of every start-up, and the start
  path makes no metadata lookup (issue 31). An ``.egg-info`` of that name, which has
  no RECORD, is still asked through ``importlib.metadata``.

When supervisord's ``__init__.py`` has replaced ours, ``import supervisor`` runs none of
our code, so nothing can refuse there: producers see the AttributeError (the README
says what it means), and ``supervisor run`` refuses.
"""

from __future__ import annotations

import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))  # no pathlib: every import pays
SUPERVISORD_MODULES = ("supervisord.py", "supervisorctl.py", "xmlrpc.py")
SUPERVISORD_DISTRIBUTION = "supervisor"
MARKER = "__pg_supervisor__"  # set by our supervisor/__init__.py, absent from theirs


class NamesakeInstalled(ImportError):
    """supervisord's files share pg-supervisor's ``supervisor`` package directory."""


def refusal(evidence: str) -> str:
    """The one line naming both distributions and what to do."""
    return ("pg-supervisor and supervisord (the PyPI distribution 'supervisor') are "
            "installed in the same environment and share the import package 'supervisor' "
            f"({evidence}): uninstall supervisord (pip uninstall supervisor), then "
            "reinstall pg-supervisor (pip install --force-reinstall pg-supervisor), or "
            "keep supervisord in an environment of its own")


def files_problem(package_dir: str = PACKAGE_DIR) -> str | None:
    """The refusal when supervisord's modules sit in our package directory (a stat
    each), else None."""
    for name in SUPERVISORD_MODULES:
        if os.path.exists(os.path.join(package_dir, name)):
            return refusal(f"supervisord's {name} is in {package_dir}")
    return None


def problem(package_dir: str = PACKAGE_DIR) -> str | None:
    """Every check: supervisord's modules, an ``__init__.py`` that is not ours, and the
    files the ``supervisor`` distribution claims. The refusal, or None."""
    found = files_problem(package_dir)
    if found is not None:
        return found
    package = sys.modules.get("supervisor")
    if package is not None and not getattr(package, MARKER, False):
        init = os.path.join(package_dir, "__init__.py")
        return refusal(f"{init} is not pg-supervisor's")
    return _claimed_problem(package_dir)


def _claimed_problem(package_dir: str) -> str | None:
    ours = os.path.realpath(package_dir)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # not a directory (a zip file), or gone
            continue
        for name in names:
            stem, _, suffix = name.rpartition(".")
            project, _, version = stem.partition("-")
            if project.lower() != SUPERVISORD_DISTRIBUTION:
                continue
            if suffix == "egg-info":
                return _claimed_by_metadata(package_dir)
            if suffix == "dist-info":
                found = _record_claims(os.path.join(entry or ".", name), ours)
                if found:
                    return refusal(f"supervisor {version} claims files in {package_dir}")
    return None


def _record_claims(info_dir: str, ours: str) -> bool:
    """Whether the RECORD of ``info_dir`` lists a file inside the directory ``ours``."""
    site = os.path.dirname(info_dir)
    try:
        with open(os.path.join(info_dir, "RECORD"), encoding="utf-8") as record:
            lines = record.read().splitlines()
    except OSError:
        return False
    for line in lines:
        if line.startswith('"'):  # a quoted path (it holds a comma): the csv rules
            import csv

            path = next(csv.reader([line]))[0]
        else:
            path = line.split(",", 1)[0]
        if not path.startswith("supervisor/"):
            continue
        located = os.path.realpath(os.path.join(site, path))
        if os.path.dirname(located) == ours or located.startswith(ours + os.sep):
            return True
    return False


def _claimed_by_metadata(package_dir: str) -> str | None:
    from importlib import metadata
    from pathlib import Path

    ours = Path(package_dir)
    try:
        dist = metadata.distribution(SUPERVISORD_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.parts[:1] != ("supervisor",):
            continue
        located = Path(str(dist.locate_file(file))).resolve()
        if located.parent == ours or ours in located.parents:
            return refusal(f"supervisor {dist.version} claims files in {package_dir}")
    return None


def refuse_at_import() -> None:
    """Run by ``supervisor/__init__.py``: raise ``NamesakeInstalled``; as the
    ``supervisor`` command, print the line and exit instead (no traceback)."""
    found = files_problem()
    if found is None:
        return
    if _is_our_command(sys.argv):
        from shared.exitcodes import CLI_ERROR

        sys.stderr.write(f"supervisor: error: {found}\n")
        raise SystemExit(CLI_ERROR)
    raise NamesakeInstalled(found)


def _is_our_command(argv: list[str]) -> bool:
    # As ``supervisor.cli.early.is_supervisor_command``, which cannot be imported here
    # (``supervisor.cli`` imports click and the CLI). ``-m`` is argv[0] while
    # ``python -m supervisor`` imports the package.
    if not argv:
        return False
    program = argv[0]
    return (os.path.basename(program) == "supervisor" or program == "-m"
            or program.endswith(os.path.join("supervisor", "__main__.py")))
