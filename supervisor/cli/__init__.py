"""The CLI room: click commands and their formatting; the queries they run are the
admin room's (``supervisor.admin``).

Door: ``main``, the ``supervisor`` command group (the console script's entry point).
"""

from supervisor.cli.early import prepare

prepare()  # before the heavy imports below: stop signals, passwords in `ps`

from supervisor.cli.main import main  # noqa: E402

__all__ = ["main"]
