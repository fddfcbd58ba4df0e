"""What a job reserves while it runs: ``cpus`` (children's worth of a supervisor's
budget) and ``memory`` (bytes), as ``@job``, ``.options``, ``enqueue`` and ``supervisor
enqueue`` take them. Checked here, before anything is written: a reservation that is
zero, negative, not a size, or above 1 TiB / 1024 CPUs is refused in one line."""

from __future__ import annotations

from typing import Any, NamedTuple

from shared.units import parse_size

MAX_CPUS = 1024
MAX_MEMORY = 1 << 40  # 1 TiB; also the schema's CHECK (0017)


class Reservation(NamedTuple):
    """A job's declared needs; None: undeclared (one CPU, memory from its kind's
    history or nothing)."""

    cpus: int | None
    memory: int | None


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


def reservation(options: Any) -> Reservation:
    """The checked reservation of ``options`` (a mapping with ``cpus`` and ``memory``)."""
    return Reservation(check_cpus(options.get("cpus")), check_memory(options.get("memory")))
