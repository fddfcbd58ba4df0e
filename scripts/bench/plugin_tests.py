"""How long a user's test written with the pytest plugin takes, against starting a
supervisor for the same job.

A scratch project (the README's ``resize`` handler and a module of ``--tests`` tests,
each enqueueing one job, asserting it with ``supervisor_enqueued`` and running it with
``supervisor_drain``) is run by its own ``pytest`` process on ``SUPERVISOR_TEST_DSN``
(default: the local server). Per test: setup + call + teardown from ``--durations``;
the first test also pays the session's database (created and migrated once) and the
last its drop, so they are reported apart. Then the same job with ``supervisor migrate``
done, enqueued, and run by ``supervisor run -n 1 --burst``: the wall time of that
command.

    python scripts/bench/plugin_tests.py [--tests 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import DEFAULT_DSN, drop_database, scratch_database

HANDLERS = '''
from workers import Discard, current_job, job

@job(queue="images", max_attempts=5, timeout=120)
def resize(path: str, width: int) -> dict:
    if not path.endswith(".png"):
        raise Discard("not a png")
    current_job().progress(1, 3, "decoding")
    return {"ok": True, "width": width}
'''

ONE_TEST = '''
def test_resize_{n}(supervisor_enqueued, supervisor_drain):
    job_id = resize.enqueue(path="{n}.png", width=64)
    assert [j.id for j in supervisor_enqueued(resize)] == [job_id]
    summary = supervisor_drain()
    assert summary.completed == 1, summary
'''


def run_plugin_tests(base_dsn: str, tests: int) -> tuple[list[float], float, float, float]:
    """(per-test seconds but the first and the last, the first test's (with the session's
    database made), the last test's (with it dropped), the pytest process's wall)."""
    with tempfile.TemporaryDirectory(prefix="plugin-bench-") as tmp:
        project = Path(tmp)
        (project / "mypipeline.py").write_text(HANDLERS)
        body = "from mypipeline import resize\n" + "".join(
            ONE_TEST.format(n=n) for n in range(tests))
        (project / "test_resize.py").write_text(body)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISOR_")}
        env.update(SUPERVISOR_TEST_DSN=base_dsn, PYTHONPATH=str(project))
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               "--durations=0", "-vv"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(done.stdout + done.stderr)
    per_test: dict[str, float] = {}
    for seconds, name in re.findall(r"^([\d.]+)s (?:setup|call|teardown)\s+\S+::(\S+)$",
                                    done.stdout, re.M):
        per_test[name] = per_test.get(name, 0.0) + float(seconds)
    first = per_test.pop("test_resize_0")
    last = per_test.pop(f"test_resize_{tests - 1}")
    return list(per_test.values()), first, last, wall


def run_supervisor_once(base_dsn: str) -> float:
    """Wall seconds of ``supervisor run -n 1 --burst`` running one enqueued job."""
    name = "bench_plugin_vs_run"
    dsn = scratch_database(base_dsn, name)
    try:
        with tempfile.TemporaryDirectory(prefix="plugin-bench-") as tmp:
            (Path(tmp) / "mypipeline.py").write_text(HANDLERS)
            env = dict(os.environ, SUPERVISOR_DSN=dsn, PYTHONPATH=tmp)
            subprocess.run([sys.executable, "-c", "from mypipeline import resize; "
                            "resize.enqueue(path='a.png', width=64)"], env=env, check=True)
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "supervisor", "run", "-n", "1", "--app",
                            "mypipeline", "--burst"], cwd=tmp, env=env, check=True,
                           capture_output=True, timeout=120)
            return time.perf_counter() - began
    finally:
        drop_database(base_dsn, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    base_dsn = os.environ.get("SUPERVISOR_TEST_DSN", DEFAULT_DSN)
    for run in range(1, options.runs + 1):
        per_test, first, last, wall = run_plugin_tests(base_dsn, options.tests)
        supervised = run_supervisor_once(base_dsn)
        print(f"run {run}: plugin test median {statistics.median(per_test) * 1000:.0f} ms, "
              f"max {max(per_test) * 1000:.0f} ms over {len(per_test)} tests; first test "
              f"(database made) {first:.2f} s, last (dropped) {last:.2f} s; pytest process "
              f"{wall:.2f} s for {options.tests} tests | supervisor run --burst, one job: "
              f"{supervised:.2f} s")


if __name__ == "__main__":
    main()
