"""docs/deploy/Dockerfile built for real with podman and run as an operator would: the
installed, byte-compiled package is what runs; tini is PID 1; the image's health check
passes against a live supervisor; ``podman stop`` while a job runs drains it and the
container exits 0; the default ``-n`` follows the container's CPU limit.

Where no registry is reachable the base is a debootstrapped stand-in for
``python:3.11-slim`` (scripts/podman_image.py, cached after the first run). podman is
configured through ``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` with its storage
in a temporary directory: nothing under /etc changes. Skips, saying why, without podman,
without root, or where podman cannot run a container.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import psycopg
import pytest
from e2e import ROOT, wait_until
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.enqueue import enqueue

if str(ROOT) not in sys.path:  # scripts/ is not an installed package
    sys.path.insert(0, str(ROOT))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # the first run makes the base image and builds
    pytest.mark.skipif(shutil.which("podman") is None,
                       reason="podman is not installed (apt-get install podman runc)"),
    pytest.mark.skipif(os.getuid() != 0, reason="configured for rootful podman: needs root"),
]

TAG = "localhost/pg-supervisor:test"
SITE = "/opt/venv/lib/python3.11/site-packages"
# slirp4netns reaches the host's loopback at this address: the test database listens there.
HOST_LOOPBACK = "10.0.2.2"


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    from scripts.podman_image import build, can_run, import_base, make_base, podman_setup

    if shutil.which("runc") is None:
        pytest.skip("runc is not installed (apt-get install runc): crun cannot set "
                    "RLIMIT_NOFILE on machines like this one")
    try:
        tarball = make_base()
    except RuntimeError as exc:
        pytest.skip(f"no base image: {exc}")
    engine = podman_setup(tmp_path_factory.mktemp("podman"))
    try:
        try:
            import_base(engine, tarball)
        except RuntimeError as exc:
            pytest.skip(f"podman cannot store an image here: {exc}")
        problem = can_run(engine)
        if problem is not None:
            pytest.skip(f"podman cannot run a container here: {problem}")
        build(engine, TAG)
        yield engine
    finally:
        engine.reset()


def test_the_image_runs_the_installed_byte_compiled_package_and_keeps_its_healthcheck(
        podman):
    probe = ("import importlib.util, json, os, supervisor.cli;"
             "init = supervisor.cli.__file__;"
             "print(json.dumps({'file': supervisor.__file__,"
             " 'pyc': os.path.exists(importlib.util.cache_from_source(init)),"
             " 'app': sorted(os.listdir('/app'))}))")
    done = podman.run("run", "--rm", "--network", "none", "--entrypoint", "python", TAG,
                      "-c", probe, check=True)
    found = json.loads(done.stdout)
    assert found["file"] == f"{SITE}/supervisor/__init__.py", found
    assert found["pyc"], found
    # ... and valid: imported from it, not compiled again at each start (uid 10001 could
    # not write a fresher one), which a .pyc older than its copied source would cause.
    verbose = podman.run("run", "--rm", "--network", "none", "--entrypoint", "python", TAG,
                         "-v", "-c", "import supervisor.cli", check=True).stderr
    assert f"code object from '{SITE}/supervisor/cli/__pycache__/__init__.cpython-311.pyc'" \
        in verbose, verbose[-2000:]
    assert "bytecode is stale" not in verbose
    assert found["app"] == ["__pycache__", "example_jobs.py"], found
    # One copy of the sources in the whole image: the installed one.
    copies = podman.run("run", "--rm", "--network", "none", "--user", "0",
                        "--entrypoint", "find", TAG,
                        "/", "-xdev", "-name", "arbiter.py", "-path", "*supervisor*",
                        check=True)
    assert copies.stdout.split() == [f"{SITE}/supervisor/arbiter.py"], copies.stdout

    # Kept only because the build asked for --format docker: OCI has no health check.
    check = json.loads(podman.run("image", "inspect", TAG, "--format",
                                  "{{json .HealthCheck}}", check=True).stdout)
    assert check and "/healthz" in " ".join(check["Test"]), check
    user, signal = podman.run("image", "inspect", TAG, "--format",
                              "{{.Config.User}} {{.Config.StopSignal}}",
                              check=True).stdout.split()
    assert (user, signal) == ("10001", "SIGTERM")


def test_the_container_is_healthy_drains_on_podman_stop_and_exits_0(podman, dsn):
    params = conninfo_to_dict(dsn)
    if params.get("host") not in ("127.0.0.1", "localhost"):
        pytest.skip(f"the test database is not on the loopback over TCP: {params.get('host')}")
    inside = make_conninfo(dsn, host=HOST_LOOPBACK)
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue("example_sleep", {"seconds": 12}, conn=conn)

    name = f"pg-supervisor-test-{os.getpid()}"
    # The image's own ENTRYPOINT and CMD (--app example_jobs --metrics-port 9100
    # --grace 25), no -n: under --cpus 1 the supervisor starts one child.
    podman.run("run", "--detach", "--name", name, "--cpus", "1",
               "--network", "slirp4netns:allow_host_loopback=true",
               "--env", f"SUPERVISOR_DSN={inside}", TAG, check=True)
    try:
        def state() -> str:
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                                   (job_id,)).fetchone()
            assert row is not None
            return row[0]

        wait_until(lambda: state() == "running", timeout=60, interval=0.2,
                   what="the job to run in the container")

        comm = podman.run("exec", name, "cat", "/proc/1/comm", check=True).stdout.strip()
        assert comm == "tini"
        child = podman.run("exec", name, "cat", "/proc/1/task/1/children",
                           check=True).stdout.split()
        assert len(child) == 1, child  # the supervisor, tini's only child
        cmdline = podman.run("exec", name, "cat", f"/proc/{child[0]}/cmdline",
                             check=True).stdout
        # Its process title once the loop has set one, its argv before.
        argv = cmdline.split("\0")
        assert cmdline.startswith("supervisor: master") or \
            argv[1:3] == ["/opt/venv/bin/supervisor", "run"], argv

        # The image's HEALTHCHECK, run as podman runs it on its timer.
        wait_until(lambda: podman.run("healthcheck", "run", name).returncode == 0,
                   timeout=30, interval=0.5, what="the health check to pass")

        assert state() == "running"  # so what follows is a drain, not an idle stop
        podman.run("stop", "--time", "40", name, timeout=90, check=True)
        exit_code = podman.run("inspect", name, "--format", "{{.State.ExitCode}}",
                               check=True).stdout.strip()
        logs = podman.run("logs", name, check=True)
    finally:
        podman.run("rm", "--force", "--time", "0", name, timeout=60)
    output = logs.stdout + logs.stderr
    assert exit_code == "0", output[-2000:]
    assert "SIGTERM: draining" in output, output[-2000:]
    assert "starting 1 children (one per CPU: 1 CPU from cgroup" in output, output[-2000:]
    assert state() == "completed"


def test_the_health_check_fails_while_the_database_is_cut_off_and_recovers(
        podman, dsn, pg_base_dsn):
    params = conninfo_to_dict(dsn)
    if params.get("host") not in ("127.0.0.1", "localhost"):
        pytest.skip(f"the test database is not on the loopback over TCP: {params.get('host')}")
    dbname = params["dbname"]
    name = f"pg-supervisor-test-cut-{os.getpid()}"
    podman.run("run", "--detach", "--name", name, "--cpus", "1",
               "--network", "slirp4netns:allow_host_loopback=true",
               "--env", f"SUPERVISOR_DSN={make_conninfo(dsn, host=HOST_LOOPBACK)}", TAG,
               check=True)
    admin = psycopg.connect(pg_base_dsn, autocommit=True)
    try:
        def healthy() -> bool:
            return podman.run("healthcheck", "run", name).returncode == 0

        wait_until(healthy, timeout=60, interval=0.5, what="the health check to pass")
        # Cut off: no new connections to the database, and the open ones ended.
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))
        wait_until(lambda: not healthy(), timeout=60, interval=0.5,
                   what="the health check to fail with the database cut off")
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        wait_until(healthy, timeout=60, interval=0.5,
                   what="the health check to pass again once the database is back")
        assert podman.run("inspect", name, "--format", "{{.State.Running}}",
                          check=True).stdout.strip() == "true"  # not restarted: recovered
    finally:
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        admin.close()
        podman.run("rm", "--force", "--time", "0", name, timeout=60)
