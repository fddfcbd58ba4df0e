"""Native thread pools sized to each child's share of the CPUs (issue 26): with
``native_threads = auto`` a child of ``-n 2`` on 2 CPUs runs one BLAS thread, for numpy
imported in the parent before the fork and for numpy imported later; ``off`` leaves
the library's default; a variable the user set is left alone. Real supervisors, real
numpy (the ``test`` extra); the CPU count comes from a fake cgroup of 2 CPUs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e import ROOT, TESTS_DIR, job_row, run_burst

from shared.cpus import CGROUP_ROOT_ENV
from shared.enqueue import enqueue
from workers import nativethreads

pytestmark = [pytest.mark.timeout(120)]


def two_cpus(tmp_path) -> dict[str, str]:
    root = tmp_path / "cgroup"
    root.mkdir(exist_ok=True)
    (root / "cpu.max").write_text("200000 100000\n")
    return {CGROUP_ROOT_ENV: str(root)}


def library_default() -> int:
    """OpenBLAS's own thread count in a fresh process with this environment."""
    code = ("import numpy, threadpoolctl; print([i['num_threads'] for i in "
            "threadpoolctl.threadpool_info() if i['user_api'] == 'blas'][0])")
    env = {k: v for k, v in os.environ.items() if k not in nativethreads.BLAS_VARIABLES
           and k not in nativethreads.OPENMP_VARIABLES}
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True).stdout)


def pools_in_children(dsn, tmp_path, kind, app, *args, env=None) -> list[dict]:
    ids = [enqueue(kind, dsn=dsn) for _ in range(4)]
    run_burst(dsn, "-n", "2", "--app", app, "--poll-interval", "0.1", *args,
              env={**two_cpus(tmp_path), **(env or {})})
    rows = [job_row(dsn, i) for i in ids]
    assert all(r["state"] == "completed" for r in rows), [r["errors"] for r in rows]
    return [r["result"] for r in rows]


@pytest.mark.slow
def test_auto_gives_each_child_of_two_on_two_cpus_one_blas_thread(dsn, tmp_path):
    for result in pools_in_children(dsn, tmp_path, "native_pools", "native_handlers"):
        assert result["threads"]["blas"] == 1
        assert result["OPENBLAS_NUM_THREADS"] == "1"


@pytest.mark.slow
def test_auto_holds_for_numpy_imported_after_the_fork(dsn, tmp_path):
    for result in pools_in_children(dsn, tmp_path, "native_pools_lazy", "native_lazy_handlers"):
        assert result["threads"]["blas"] == 1


@pytest.mark.slow
def test_off_leaves_the_library_default(dsn, tmp_path):
    default = library_default()
    if default == 1:
        pytest.skip("this machine's OpenBLAS starts one thread anyway")
    results = pools_in_children(dsn, tmp_path, "native_pools", "native_handlers",
                                "--native-threads", "off")
    for result in results:
        assert result["threads"]["blas"] == default
        assert result["OPENBLAS_NUM_THREADS"] is None


@pytest.mark.slow
def test_a_variable_the_user_set_is_left_alone(dsn, tmp_path):
    results = pools_in_children(dsn, tmp_path, "native_pools", "native_handlers",
                                env={"OPENBLAS_NUM_THREADS": "2"})
    for result in results:
        assert result["threads"]["blas"] == 2
        assert result["OPENBLAS_NUM_THREADS"] == "2"
        assert result["OMP_NUM_THREADS"] == "1"  # OpenMP's pools are still sized


def test_limit_sets_only_the_variables_the_user_did_not():
    environ = {"OMP_NUM_THREADS": "3"}
    done = nativethreads.limit(2, environ)
    assert environ["OMP_NUM_THREADS"] == "3"
    assert environ["OPENBLAS_NUM_THREADS"] == environ["MKL_NUM_THREADS"] == "2"
    assert environ["NUMEXPR_NUM_THREADS"] == "2"
    assert "OMP_NUM_THREADS" not in done.variables


def test_a_child_takes_its_parents_look_at_the_pools_instead_of_reading_its_maps(
        monkeypatch):
    """The parent looks before each fork, again only when a module was imported since;
    a child's ``limit`` takes that look (its mappings are the parent's at the fork)."""
    looks: list[bool] = []

    def look() -> bool:
        looks.append(False)
        return False

    monkeypatch.setattr(nativethreads, "pools_loaded", look)
    monkeypatch.setattr(nativethreads, "_parent_look", None)
    assert nativethreads.loaded_at_fork() is False and len(looks) == 1  # no parent: its own
    nativethreads.prepare()
    nativethreads.prepare()  # nothing imported since: no second look
    assert len(looks) == 2
    assert nativethreads.loaded_at_fork() is False and len(looks) == 2
    monkeypatch.setitem(sys.modules, "imported_since", object())
    nativethreads.prepare()
    assert len(looks) == 3
    monkeypatch.setattr(nativethreads, "_parent_look", (len(sys.modules), True))
    assert nativethreads.loaded_at_fork() is True and len(looks) == 3


def test_a_jobs_resize_reads_the_childs_own_maps_not_its_parents_look(monkeypatch):
    """A handler may load numpy after the boot: a job that reserved several CPUs has
    the pools the child maps now resized, whatever the parent saw before the fork."""
    looks: list[bool] = []

    def look() -> bool:
        looks.append(False)
        return False

    monkeypatch.setattr(nativethreads, "pools_loaded", look)
    monkeypatch.setattr(nativethreads, "_parent_look", (len(sys.modules), False))
    monkeypatch.setattr(nativethreads, "_ours",
                        nativethreads.Limited(("OPENBLAS_NUM_THREADS",), ()))
    monkeypatch.setattr(nativethreads, "_current", 1)
    environ: dict[str, str] = {}
    nativethreads.resize(4, environ)
    assert looks and environ["OPENBLAS_NUM_THREADS"] == "4"


def test_the_child_share_of_the_cpus():
    from supervisor.config import build_config

    config = build_config({"children": 3})
    assert config.threads_per_child() == max(1, config.cpus.count // 3)
    assert build_config({"native_threads": "off"}).threads_per_child() is None
    assert build_config({"native_threads": 4}).threads_per_child() == 4


@pytest.mark.parametrize("value", ["0", "-1", "many", "1.5"])
def test_bad_native_threads_is_refused_with_one_line(value):
    code = (f"from supervisor.cli.main import main; main(['run', '--app', 'x', "
            f"'--native-threads', {value!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{TESTS_DIR}:{ROOT}"})
    assert done.returncode == 2
    assert (f"Invalid value for '--native-threads': {value!r} is not auto, off or a whole "
            "number of at least 1") in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["0", "'lots'", "true"])
def test_bad_native_threads_in_the_config_file_is_refused(tmp_path, value):
    from supervisor.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="native_threads must be auto, off"):
        build_config({"native_threads": {"0": 0, "'lots'": "lots", "true": True}[value]})
