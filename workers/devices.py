"""Counted resources in the child (issue 45): a job that holds GPUs sees exactly those.

Admission in the parent gives each job the indices of the counted resources it holds
(``{"gpu": [1]}``, carried in its RUN frame). Before its handler runs, the child sets
``CUDA_VISIBLE_DEVICES`` to its GPU indices, so CUDA, PyTorch, JAX and the rest see only
those; after, the child's own value comes back (the next job may hold other devices or
none). Other resources (licences, a shared disk) are only counted: the job finds what it
holds in ``current_job().devices``.
"""

from __future__ import annotations

import os

GPU = "gpu"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def expose(devices: dict[str, list[int]]) -> str | None:
    """Show the job its GPUs; returns the value to ``restore`` (None: it was unset)."""
    before = os.environ.get(CUDA_VISIBLE_DEVICES)
    gpus = devices.get(GPU)
    if gpus is not None:
        os.environ[CUDA_VISIBLE_DEVICES] = ",".join(str(index) for index in gpus)
    return before


def restore(before: str | None) -> None:
    """Put back the child's own ``CUDA_VISIBLE_DEVICES`` after a job that held devices."""
    if before is None:
        os.environ.pop(CUDA_VISIBLE_DEVICES, None)
    else:
        os.environ[CUDA_VISIBLE_DEVICES] = before
