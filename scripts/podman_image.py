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
(Debian 12's Python 3.11 with ``venv``, ``python`` on PATH, apt's lists cleaned as the
official images do) and imported under that name, so the Dockerfile builds unchanged
(``--pull=never``). The stand-in also carries this machine's CA bundle and a pip.conf
naming it: this machine's egress to PyPI presents certificates of its own CA. The
tarball is cached (``$XDG_CACHE_HOME/pg-supervisor-podman``, or
``SUPERVISOR_PODMAN_BASE`` names one); debootstrap took under a minute here.

Usage::

    python scripts/podman_image.py base                    # make (or find) the stand-in
    python scripts/podman_image.py importtime --runs 12    # the figures in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
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
             "--include=python3,python3-venv,python-is-python3,ca-certificates",
             "bookworm", str(rootfs), MIRROR],
            capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed: {done.stdout[-800:]}{done.stderr[-800:]}")
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
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
          target: str | None = None) -> None:
    """``podman build --format docker`` from the repository root (the HEALTHCHECK is
    kept only in the docker format)."""
    # The host's network for RUN: no bridge, no firewall rules for a build.
    args = ["build", "--format", "docker", "--pull=never", "--network", "host",
            "-f", str(dockerfile), "-t", tag]
    if target:
        args += ["--target", target]
    podman.run(*args, str(ROOT), timeout=1200, check=True)


def importtime_us(podman: Podman, image: str, *, workdir: str | None = None) -> int:
    """``supervisor.cli``'s cumulative import time in one fresh container, in µs."""
    args = ["run", "--rm", "--network", "none", "--entrypoint", "python"]
    if workdir:
        args += ["-w", workdir]
    done = podman.run(*args, image, "-X", "importtime", "-c", "import supervisor.cli",
                      check=True)
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == "supervisor.cli":
            return int(parts[1])
    raise RuntimeError(f"no supervisor.cli line in {image}'s -X importtime output")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("base", help="make (or find) the stand-in base tarball")
    times = sub.add_parser("importtime", help="import times in the built image and others")
    times.add_argument("--runs", type=int, default=12)
    times.add_argument("--before", metavar="REV",
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
            cases = [("the image (installed package in /opt/venv)", "pg-supervisor:now", None),
                     ("plain `pip install .` (build stage, cwd /)", "pg-supervisor:plain", "/")]
            if args.before:
                old = podman.workdir / "Dockerfile.before"
                old.write_text(subprocess.run(
                    ["git", "show", f"{args.before}:docs/deploy/Dockerfile"], cwd=ROOT,
                    capture_output=True, text=True, check=True).stdout)
                build(podman, "pg-supervisor:before", dockerfile=old)
                cases.append((f"the image at {args.before} (PYTHONPATH=/app sources)",
                              "pg-supervisor:before", None))
            for label, image, workdir in cases:
                runs = [importtime_us(podman, image, workdir=workdir) for _ in range(args.runs)]
                print(f"{label}: median {statistics.median(runs) / 1000:.0f} ms "
                      f"(min {min(runs) / 1000:.0f}, max {max(runs) / 1000:.0f}, "
                      f"{args.runs} runs)")
        finally:
            podman.reset()
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        print(f"podman_image: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
