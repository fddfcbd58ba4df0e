"""The job of ``native_blas.py``: a chain of matrix products in numpy, for ``supervisor
run --app native_blas_jobs`` (this folder on the path) and ``multiprocessing.Pool``.
numpy is imported here, at the top: in the supervisor's parent, before the fork, as an
app module usually does."""

from __future__ import annotations

import numpy

from workers import job

SIZE = 300
PRODUCTS = 50


def products(seed: int) -> float:
    """``PRODUCTS`` products of ``SIZE`` x ``SIZE`` matrices, kept from overflowing."""
    rng = numpy.random.default_rng(seed)
    a = rng.random((SIZE, SIZE))
    for _ in range(PRODUCTS):
        a = a @ a
        a /= numpy.abs(a).max()
    return float(a.sum())


@job(queue="blas")
def blas_products(seed: int) -> float:
    return products(seed)
