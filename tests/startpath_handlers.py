"""Handlers for tests/test_start_path.py. Imported by the parent before it forks (as
every ``--app`` module is), this module writes the parent's ``sys.modules`` to the file
named by ``STARTPATH_PARENT`` when the parent exits; the handler returns the child's,
which holds what the parent had imported when it forked."""

from __future__ import annotations

import atexit
import gc
import os
import sys

from workers import job

_PARENT = os.getpid()


def _parent_modules() -> None:
    if os.getpid() == _PARENT:  # children leave with os._exit: this runs in the parent
        with open(os.environ["STARTPATH_PARENT"], "w") as out:
            out.write("\n".join(sorted(sys.modules)))
        with open(os.environ["STARTPATH_PARENT"] + ".gc", "w") as out:
            out.write(str(gc.isenabled()))


atexit.register(_parent_modules)


@job(queue="startpath")
def startpath_first() -> list[str]:
    """The modules loaded in this child at its job."""
    return sorted(sys.modules)
