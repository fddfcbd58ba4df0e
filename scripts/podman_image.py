"""Build and run docs/deploy/Dockerfile with podman on a machine like this one.

What it takes here (Debian 12, root, no container registry reachable, cgroup v1, no
systemd): podman, runc and debootstrap from the Debian packages, and two configuration
files written to a directory of our own and named by ``CONTAINERS_CONF`` and
``CONTAINERS_STORAGE_CONF`` (nothing under /etc is changed):

* ``containers.conf``: ``runtime = "runc"`` (crun fails to set RLIMIT_NOFILE here),
  ``default_ulimits`` within this process's hard limits (podman's defaults are above
  them and the runtime may not raise them), ``cgroup_manager = "cgroupfs"`` and
  ``events_logger = "file"`` (no systemd).
* ``storage.conf``: overlay storage inside that directory, so it can be dropped whole.

With no registry to pull ``python:3.11-slim`` from, a stand-in is made with debootstrap
(Debian 12's Python 3.11 with ``pip`` and ``venv``, ``python`` on PATH, no PEP 668
marker, apt's lists cleaned as the official images do) and imported under that name,
so the Dockerfile builds unchanged (``--pull=never``). The stand-in also carries this
machine's CA bundle and a pip.conf naming it: this machine's egress to PyPI presents
certificates of its own CA. The tarball is cached (``$XDG_CACHE_HOME/pg-supervisor-podman``, or
``SUPERVISOR_PODMAN_BASE`` names one); debootstrap took under a minute here.

Usage::

    python scripts/podman_image.py base                    # make (or find) the stand-in
    python scripts/podman_image.py importtime --runs 10 --before REV   # docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docs" / "deploy" / "Dockerfile"
BASE_NAME = "docker.io/library/python:3.11-slim"
BASE_ENV = "SUPERVISOR_PODMAN_BASE"
MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# What the official images put in /etc/apt/apt.conf.d/docker-clean: no .deb or cache kept.
APT_CLEAN = ('DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
             '/var/cache/apt/*.bin || true"; };\nDir::Cache::pkgcache ""; '
             'Dir::Cache::srcpkgcache "";\n')


@dataclass(frozen=True)
class Podman:
    """podman with this module's configuration: ``env`` names the two files."""

    workdir: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """``podman ARGS``; its output as text. ``check`` raises with podman's stderr."""
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:2])} failed ({done.returncode}): "
                               f"{errors(done.stderr)[-1500:]}")
        return done

    def reset(self) -> None:
        """Remove every container and image of this storage, then the storage itself.
        (Not ``podman system reset``: that also touches the host's network settings.)"""
        self.run("rm", "--all", "--force", "--time", "0", timeout=300)
        self.run("rmi", "--all", "--force", timeout=300)
        for line in reversed(Path("/proc/mounts").read_text().splitlines()):
            point = line.split()[1]
            if point.startswith(f"{self.workdir}/"):
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)
        shutil.rmtree(self.workdir, ignore_errors=True)


def errors(stderr: str) -> str:
    """podman's stderr without the complaints that there is no systemd to run health
    checks on a timer (``podman healthcheck run`` works without it)."""
    return "\n".join(line for line in stderr.splitlines()
                     if "unable to get systemd connection" not in line)


def podman_setup(workdir: Path) -> Podman:
    """Write containers.conf and storage.conf into ``workdir``; podman configured by them."""
    workdir.mkdir(parents=True, exist_ok=True)
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    # Even the hard limit itself was refused for RLIMIT_NPROC here; a few thousand is
    # plenty for a supervisor's children.
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)
    (workdir / "containers.conf").write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n')
    (workdir / "storage.conf").write_text(
        "[storage]\n"
        'driver = "overlay"\n'
        f'runroot = "{workdir / "run"}"\n'
        f'graphroot = "{workdir / "graph"}"\n')
    env = dict(os.environ, CONTAINERS_CONF=str(workdir / "containers.conf"),
               CONTAINERS_STORAGE_CONF=str(workdir / "storage.conf"))
    return Podman(workdir, env)


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
        "pg-supervisor-podman"


def cached_base() -> Path | None:
    """The stand-in base's tarball if one is made already."""
    named = os.environ.get(BASE_ENV)
    path = Path(named) if named else cache_dir() / "bookworm-python3.11.tar"
    return path if path.is_file() else None


def make_base() -> Path:
    """The stand-in for python:3.11-slim as a tarball, made with debootstrap if not cached."""
    found = cached_base()
    if found is not None:
        return found
    if shutil.which("debootstrap") is None:
        raise RuntimeError("no stand-in base image and no debootstrap to make one "
                           "(apt-get install debootstrap)")
    target = cache_dir() / "bookworm-python3.11.tar"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        done = subprocess.run(
            ["debootstrap", "--variant=minbase",
             "--include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates",
             "bookworm", str(rootfs), MIRROR],
            capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed: {done.stdout[-800:]}{done.stderr[-800:]}")
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
        # python:3.11-slim's pip installs into the system's site-packages; Debian's
        # marker (PEP 668) would refuse that.
        (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
        for junk in [*(rootfs / "var/lib/apt/lists").glob("*_*"),
                     *(rootfs / "var/cache/apt/archives").glob("*.deb"),
                     *(rootfs / "var/cache/apt").glob("*.bin")]:
            junk.unlink()
        if HOST_CA_BUNDLE.is_file():
            shutil.copy(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
            (rootfs / "etc/pip.conf").write_text(f"[global]\ncert = {HOST_CA_BUNDLE}\n")
        partial = target.with_suffix(".part")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True,
                       timeout=600)
        partial.rename(target)
    return target


def import_base(podman: Podman, tarball: Path) -> None:
    """The stand-in, under the official image's name, so ``FROM`` finds it locally."""
    podman.run("import", "--change", 'CMD ["python3"]', str(tarball), BASE_NAME,
               timeout=600, check=True)


def can_run(podman: Podman) -> str | None:
    """Why podman cannot run a container of the base here, in one line; None if it can."""
    done = podman.run("run", "--rm", "--network", "none", BASE_NAME, "true", timeout=120)
    if done.returncode == 0:
        return None
    lines = errors(done.stderr).strip().splitlines()
    return lines[-1] if lines else f"podman run exited {done.returncode}"


def build(podman: Podman, tag: str, dockerfile: Path = DOCKERFILE,
          target: str | None = None, context: Path = ROOT) -> None:
    """``podman build --format docker`` from the repository root (the HEALTHCHECK is
    kept only in the docker format). podman 4.3 does not read
    ``docs/deploy/Dockerfile.dockerignore``: the checkout's ``__pycache__`` folders are
    in the context, which the two-stage Dockerfile never copies to its final stage."""
    # The host's network for RUN: no bridge, no firewall rules for a build.
    args = ["build", "--format", "docker", "--pull=never", "--network", "host",
            "-f", str(dockerfile), "-t", tag]
    if target:
        args += ["--target", target]
    podman.run(*args, str(context), timeout=1200, check=True)


# Run in the container by the image's own interpreter: starts PYTHON ``-X importtime -c
# "import MODULES"`` N times, one after another, and prints for each the first module's
# cumulative import (wall) time and the whole process's CPU time (user + system, from
# wait4), in µs. The CPU time is what a loaded machine inflates least: waiting for a
# core is not in it.
TIMER = """
import os, subprocess, sys
python, starts, modules = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for _ in range(starts):
    child = subprocess.Popen([python, "-X", "importtime", "-c", "import " + modules],
                             stderr=subprocess.PIPE, text=True)
    err = child.stderr.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        sys.exit(err[-1000:])
    first = modules.split(",")[0].strip()
    lines = [l for l in err.splitlines() if l.rstrip().endswith("| " + first)]
    cumulative = int(lines[-1].split("|")[1])
    print(cumulative, round((usage.ru_utime + usage.ru_stime) * 1e6))
"""


@dataclass(frozen=True)
class Start:
    """One interpreter's start: ``supervisor.cli``'s import (wall) and the process's CPU."""

    import_us: int
    cpu_us: int


def time_starts(podman: Podman, image: str, *, workdir: str | None = None,
                python: str = "python", starts: int = 5,
                modules: str = "supervisor.cli") -> list[Start]:
    """``starts`` fresh interpreters run one after another in one container."""
    args = ["run", "--rm", "--network", "none", "--entrypoint", python]
    if workdir:
        args += ["-w", workdir]
    done = podman.run(*args, image, "-c", TIMER, python, str(starts), modules, check=True)
    found = [Start(*map(int, line.split())) for line in done.stdout.splitlines()]
    if len(found) != starts:
        raise RuntimeError(f"{len(found)} timings from {image}, not {starts}")
    return found


@dataclass(frozen=True)
class Case:
    """One image to time, and how to start its interpreter."""

    label: str
    image: str
    workdir: str | None = None
    python: str = "python"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("base", help="make (or find) the stand-in base tarball")
    measure = sub.add_parser("importtime", help="import times in the built image and others")
    measure.add_argument("--runs", type=int, default=12,
                         help="rounds; each starts 5 interpreters per image, images in turn")
    measure.add_argument("--modules", default="supervisor.cli",
                         help="what each start imports (the first one's import is timed)")
    measure.add_argument("--before", metavar="REV",
                       help="also the image of the Dockerfile at this git revision")
    args = parser.parse_args()
    try:
        tarball = make_base()
        if args.command == "base":
            print(tarball)
            return 0
        podman = podman_setup(Path(tempfile.mkdtemp(prefix="pg-supervisor-podman-")))
        try:
            import_base(podman, tarball)
            problem = can_run(podman)
            if problem:
                raise RuntimeError(f"podman cannot run a container here: {problem}")
            build(podman, "pg-supervisor:now")
            build(podman, "pg-supervisor:plain", target="build")
            cases = [Case("the image (installed package in /opt/venv)", "pg-supervisor:now"),
                     Case("plain `pip install .` (the build stage's venv, cwd /)",
                          "pg-supervisor:plain", workdir="/", python="/opt/venv/bin/python")]
            if args.before:
                # From a clean tree of that revision: that Dockerfile copied the sources,
                # and this checkout's __pycache__ folders would come with them.
                tree = podman.workdir / "before"
                tree.mkdir()
                archive = subprocess.run(["git", "archive", args.before], cwd=ROOT,
                                         capture_output=True, check=True).stdout
                subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
                build(podman, "pg-supervisor:before",
                      dockerfile=tree / "docs" / "deploy" / "Dockerfile", context=tree)
                cases.append(Case(f"the image at {args.before} (PYTHONPATH=/app sources)",
                                  "pg-supervisor:before"))
            # Round-robin, in a new order each round, so the machine's load drifts over
            # every case alike.
            times: dict[str, list[Start]] = {case.label: [] for case in cases}
            for _ in range(args.runs):
                for case in random.sample(cases, len(cases)):
                    times[case.label] += time_starts(
                        podman, case.image, workdir=case.workdir, python=case.python,
                        modules=args.modules)
            for label, runs in times.items():
                imports = [s.import_us / 1000 for s in runs]
                cpus = [s.cpu_us / 1000 for s in runs]
                print(f"{label}: import {args.modules} median {statistics.median(imports):.0f} "
                      f"ms (min {min(imports):.0f}); process CPU median "
                      f"{statistics.median(cpus):.0f} ms (min {min(cpus):.0f}); "
                      f"{len(runs)} starts")
        finally:
            podman.reset()
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        print(f"podman_image: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
