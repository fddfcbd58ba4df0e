"""Handlers for the native-thread tests, loaded with ``--app native_handlers``: numpy
is imported here, in the parent, before the children are forked."""

import os

import numpy  # noqa: F401  (its OpenBLAS pool exists before the fork)
import threadpoolctl

from workers import job


def pools() -> dict:
    """Threads of each native pool this process has loaded, and the variables set."""
    return {"threads": {info["user_api"]: info["num_threads"]
                        for info in threadpoolctl.threadpool_info()},
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


@job
def native_pools() -> dict:
    return pools()
