"""A module a child imports at boot that takes a while, so a test can kill children
that are still booting (a slow import of a large app)."""

import time

time.sleep(0.4)
