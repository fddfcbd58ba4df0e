"""``multiprocessing.Pool(2)`` as a program of its own, for ``peers_cpu.py``'s
``pool-script`` row: the script a user would write instead of a job queue, started
fresh for each run and timed from its ``exec`` like every worker, so the interpreter's
start and its imports are on its clock too. (The reference row, ``pool``, runs the Pool
inside the already-running harness: no start-up at all.)

Usage: python peer_pool.py cpu|noop COUNT N   (N: ``spin`` iterations of a CPU job)
"""

from __future__ import annotations

import multiprocessing
import sys

import bench_job


def main() -> None:
    kind, count, n = sys.argv[1], int(sys.argv[2]), int(float(sys.argv[3]))
    with multiprocessing.get_context("fork").Pool(2) as pool:
        if kind == "cpu":
            pool.map(bench_job.cpu, [n] * count, chunksize=1)
        else:
            pool.starmap(bench_job.noop, [()] * count, chunksize=1)


if __name__ == "__main__":
    main()
