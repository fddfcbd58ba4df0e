"""Versions of the libraries the CLI imports at once, without a metadata lookup.

psycopg and psycopg-binary each read their own version through ``importlib.metadata``
when imported: a scan of every ``sys.path`` entry, and the import of
``importlib.metadata`` with email, zipfile and csv, about 25 ms of CPU, a tenth of
``supervisor run``'s start (issue 31). ``known_versions`` gives them the version their
installed ``.dist-info`` directory is named for instead, when their version module is
the one-liner that asks for nothing else; otherwise it leaves them to read it.
"""

from __future__ import annotations

import os
import re
import sys
import types

# The version modules of the distributions the CLI imports at once, and the package whose
# dist-info names its version: (version module, distribution's directory prefix).
PSYCOPG = (("psycopg", "psycopg-"), ("psycopg_binary", "psycopg_binary-"))
# All a version module may hold for ours to stand in for it (docstring and comments
# aside): psycopg's and psycopg-binary's (3.3).
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
                                        "directory's name (supervisor.cli.versions)")
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
