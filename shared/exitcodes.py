"""Named exit codes, for child processes and for the CLI.

A child's exit code tells the parent why it left, so the parent can tell a planned
recycle from a crash without guessing from signals.
"""

# Child processes.
CHILD_OK = 0  # asked to stop (STOP frame or EOF) and did so cleanly
CHILD_RECYCLE = 64  # left on purpose after its job: max jobs or memory reached
CHILD_BOOT_ERROR = 65  # post-fork setup failed; a crash loop of these halts the pool
CHILD_IMPORT_ERROR = 66  # a handler module failed to import in the child
CHILD_PARENT_GONE = 67  # the parent died before or while the child booted
CHILD_PIPE_LOST = 68  # a handler closed or replaced the child's pipe to the parent

# Exits before READY that mean the code cannot start: only these count toward the
# crash-loop halt (a child killed from outside while booting is respawned instead).
CHILD_BOOT_FAILURES = frozenset({CHILD_BOOT_ERROR, CHILD_IMPORT_ERROR})

CHILD_EXIT_NAMES = {
    CHILD_OK: "ok",
    CHILD_RECYCLE: "recycle",
    CHILD_BOOT_ERROR: "boot error",
    CHILD_IMPORT_ERROR: "import error",
    CHILD_PARENT_GONE: "parent gone",
    CHILD_PIPE_LOST: "a handler closed its job pipe",
}

# The command line.
CLI_OK = 0
CLI_ERROR = 1  # runtime failure: unreachable database, crash loop, bad config file
CLI_USAGE = 2  # bad flags or malformed input (click's own usage errors use 2 as well)
# A burst (``run --burst``) that ran to its end, but jobs it ran were discarded (out of
# attempts, a terminal failure, poison) or their dependents cancelled because of that:
# cron and CI tell a failed run from a good one. ``--discards-ok`` exits 0 instead.
CLI_JOBS_FAILED = 3


def describe_child_exit(status: int) -> str:
    """Turn a ``waitpid`` status into words for a job's error: ``killed by SIGSEGV``,
    ``exited with code 3``, ``exited (recycle)``."""
    import os
    import signal

    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if code in CHILD_EXIT_NAMES:
            return f"exited ({CHILD_EXIT_NAMES[code]})"
        return f"exited with code {code}"
    return f"ended with status {status}"
