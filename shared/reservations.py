"""What a job reserves while it runs: ``cpus`` (children's worth of a supervisor's
budget), ``memory`` (bytes) and counted ``resources`` (``{"gpu": 1}``: GPUs, licences,
anything a supervisor declares with ``--resources gpu=2``), as ``@job``, ``.options``,
``enqueue`` and ``supervisor enqueue`` take them. Checked here, before anything is
written: a reservation that is zero, negative, not a size, above 1 TiB / 1024 CPUs, or a
resource that is not ``name=count`` is refused in one line."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from shared.units import parse_size

MAX_CPUS = 1024
MAX_MEMORY = 1 << 40  # 1 TiB; also the schema's CHECK (0017)
MAX_RESOURCE = 1024  # of one named resource, per job and per supervisor
# A resource's name: lower case, as Prometheus label values and env names take it.
RESOURCE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


class Reservation(NamedTuple):
    """A job's declared needs; None: undeclared (one CPU, memory from its kind's
    history or nothing, no counted resource)."""

    cpus: int | None
    memory: int | None
    resources: dict[str, int] | None = None

    @property
    def declared(self) -> bool:
        """Whether anything is reserved at all."""
        return self.cpus is not None or self.memory is not None or bool(self.resources)

    def resources_json(self) -> str | None:
        """The counted resources as the JSON text the ``resources`` column (0027) holds."""
        if not self.resources:
            return None
        return "{" + ",".join(f'"{name}":{count}' for name, count in
                              sorted(self.resources.items())) + "}"


def check_cpus(value: Any) -> int | None:
    """``value`` as a CPU reservation (None stays None), else ``ValueError``."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CPUS:
        raise ValueError(f"cpus must be a whole number from 1 to {MAX_CPUS}, not {value!r}")
    return value


def check_memory(value: Any) -> int | None:
    """``value`` (bytes, or a size like ``"6GiB"``) as a memory reservation in bytes
    (None stays None), else ``ValueError``."""
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, int | float) and value <= 0):
        raise ValueError(f"memory must be a size above 0 like 512MiB or 6GiB, not {value!r}")
    size = parse_size(value, "memory")
    if not 1 <= size <= MAX_MEMORY:
        raise ValueError(f"memory must be a size from 1 byte to 1TiB, not {value!r}")
    return size


def check_resources(value: Any, what: str = "resources") -> dict[str, int] | None:
    """``value`` (a mapping of name to count, e.g. ``{"gpu": 1}``) as counted resources
    (None or empty: none), else ``ValueError`` naming the first bad entry."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping of name to count like {{'gpu': 1}}, "
                         f"not {value!r}")
    checked: dict[str, int] = {}
    for name, count in value.items():
        if not isinstance(name, str) or not RESOURCE_NAME.fullmatch(name):
            raise ValueError(f"{what}: {name!r} is not a resource name (lower-case letters, "
                             "digits and _, starting with a letter, at most 32)")
        if (not isinstance(count, int) or isinstance(count, bool)
                or not 1 <= count <= MAX_RESOURCE):
            raise ValueError(f"{what}: {name}={count!r}: a count must be a whole number "
                             f"from 1 to {MAX_RESOURCE}")
        checked[name] = count
    return checked or None


def parse_resources(text: str | None, what: str = "--resources") -> dict[str, int] | None:
    """``gpu=2,licence=1`` (the CLI's and the config's form) as checked counted resources;
    None or empty: none."""
    if not text:
        return None
    found: dict[str, int] = {}
    for part in text.split(","):
        name, sep, count = part.strip().partition("=")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"{what}: {part.strip()!r} is not name=count with a whole "
                             f"number from 1 to {MAX_RESOURCE}, e.g. gpu=2")
        if name.strip() in found:
            raise ValueError(f"{what}: {name.strip()} is given twice")
        found[name.strip()] = int(count)
    return check_resources(found, what)


def reservation(options: Any) -> Reservation:
    """The checked reservation of ``options`` (a mapping with ``cpus``, ``memory`` and
    optionally ``resources``)."""
    return Reservation(check_cpus(options.get("cpus")), check_memory(options.get("memory")),
                       check_resources(options.get("resources")))
