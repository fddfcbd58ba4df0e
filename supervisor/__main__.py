"""``python -m supervisor``: the same as the ``supervisor`` console script."""

from supervisor.cli import main

main()
