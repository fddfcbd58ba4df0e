"""The CLI room: click commands, the admin queries they run, and their formatting.

Door: ``main``, the ``supervisor`` command group (the console script's entry point).
"""

from supervisor.cli.main import main

__all__ = ["main"]
