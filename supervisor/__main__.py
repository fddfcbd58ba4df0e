"""``python -m supervisor``: the same as the ``supervisor`` console script."""

from supervisor.cli.main import main

main()
