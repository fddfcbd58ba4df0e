"""What a set of jobs cost, every attempt counted: per batch (``Batch.summary().cost``,
``supervisor batches show``, the dashboard's batch page) and per concurrency key
(``supervisor status --keys``).

Each attempt's usage is stored once (schema 0014): a failed attempt's in its ``errors``
entry, a completed job's last attempt in ``usage``. A failed job's ``usage`` repeats its
last errors entry's, so it is read only for completed jobs. Attempts the parent ended
(timeout, hang, crash) have no usage: they count in ``attempts`` but not in the sums
(``measured`` says how many did). An errors array capped by schema 0022 (hundreds of
failures with long messages) may have dropped middle entries: the sums are then a
lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from shared.units import format_size
from shared.usage_sql import in_range, usage_figure, usage_number

__all__ = ["CostRollup", "batch_cost", "key_costs"]


@dataclass(frozen=True)
class CostRollup:
    """What a set of jobs cost over all their attempts."""

    jobs: int
    attempts: int  # attempts started (a job's ``attempt``, summed)
    retries: int  # attempts after each job's first
    measured: int  # attempts with a usage (the others were ended by their parent)
    cpu_seconds: float  # summed over measured attempts
    wall_seconds: float
    peak_rss_p95: int | None  # bytes: the 95th percentile of the attempts' peak RSS
    peak_rss_max: int | None

    def describe(self) -> str:
        """One line: ``12.3 CPU-s, 15.0 wall-s, peak memory p95 120.0 MiB (max 130.0 MiB),
        1040 attempts (40 retries)``."""
        attempts = f"{self.attempts} attempts ({self.retries} retries)"
        if not self.measured:
            return f"no attempt measured yet; {attempts}"
        peak = ""
        if self.peak_rss_p95 is not None and self.peak_rss_max is not None:
            peak = (f", peak memory p95 {format_size(self.peak_rss_p95)} "
                    f"(max {format_size(self.peak_rss_max)})")
        unmeasured = self.attempts - self.measured
        return (f"{self.cpu_seconds:.1f} CPU-s, {self.wall_seconds:.1f} wall-s{peak}, "
                f"{attempts}" + (f", {unmeasured} not measured" if unmeasured > 0 else ""))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for ``--json`` and the dashboard's API."""
        return dict(self.__dict__)


_ROLLUP = """
WITH m AS ({members}),
jobs AS (SELECT grp, count(*) AS jobs, coalesce(sum(attempt), 0) AS attempts,
                coalesce(sum(greatest(attempt - 1, 0)), 0) AS retries
         FROM m GROUP BY grp),
tried AS (
    SELECT m.grp, e.value -> 'usage' AS u
    FROM m CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(m.errors) = 'array' THEN m.errors ELSE '[]' END) AS e
    WHERE jsonb_typeof(e.value -> 'usage') = 'object'
    UNION ALL
    SELECT grp, usage FROM m WHERE state = 'completed' AND jsonb_typeof(usage) = 'object'),
figures AS (SELECT grp, {cpu} AS cpu, {wall} AS wall, {rss} AS rss FROM tried),
spent AS (
    SELECT grp, count(*) AS measured,
           coalesce(sum(cpu) FILTER (WHERE {cpu_ok}), 0) AS cpu,
           coalesce(sum(wall) FILTER (WHERE {wall_ok}), 0) AS wall,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY rss) FILTER (WHERE {rss_ok}) AS p95,
           max(rss) FILTER (WHERE {rss_ok}) AS peak
    FROM figures GROUP BY grp)
SELECT j.grp, j.jobs, j.attempts, j.retries, coalesce(s.measured, 0),
       coalesce(s.cpu, 0), coalesce(s.wall, 0), s.p95, s.peak
FROM jobs j LEFT JOIN spent s ON s.grp IS NOT DISTINCT FROM j.grp
ORDER BY j.grp
"""
_CHECKS = {"wall_ok": in_range("wall"), "cpu_ok": in_range("cpu"), "rss_ok": in_range("rss")}

# A batch's members, through jobs_batch_idx.
_BATCH_MEMBERS = """SELECT batch_id AS grp, attempt, state, usage, errors
FROM supervisor.jobs WHERE batch_id = %(batch)s"""
# Jobs with a concurrency key finished in the window, through the finished index.
_KEYED = """SELECT concurrency_key AS grp, attempt, state, usage, errors
FROM supervisor.jobs
WHERE state IN ('completed', 'discarded', 'cancelled', 'expired')
  AND finished_at > now() - %(window)s * interval '1 second'
  AND concurrency_key IS NOT NULL"""


def _statements(members: str) -> tuple[str, str]:
    """The roll-up with the plain casts (cheap) and with the careful reading, for when a
    hand-written usage fails the cast (``shared.usage_sql``)."""
    plain = _ROLLUP.format(members=members, cpu=usage_figure("cpu_seconds", "u"),
                           wall=usage_figure("wall_seconds", "u"),
                           rss=usage_figure("max_rss_bytes", "u"), **_CHECKS)
    guarded = _ROLLUP.format(members=members, cpu=usage_number("cpu_seconds", "u"),
                             wall=usage_number("wall_seconds", "u"),
                             rss=usage_number("max_rss_bytes", "u"), **_CHECKS)
    return plain, guarded


_BATCH = _statements(_BATCH_MEMBERS)
_KEYS = _statements(_KEYED)


def _rollups(conn: psycopg.Connection, statements: tuple[str, str],
             params: dict[str, Any]) -> list[tuple[Any, CostRollup]]:
    plain, guarded = statements
    try:
        with conn.transaction():
            rows = conn.execute(plain, params).fetchall()
    except psycopg.errors.DataError:
        rows = conn.execute(guarded, params).fetchall()
    return [(grp, CostRollup(int(jobs), int(attempts), int(retries), int(measured),
                             float(cpu), float(wall),
                             None if p95 is None else round(p95),
                             None if peak is None else round(peak)))
            for grp, jobs, attempts, retries, measured, cpu, wall, p95, peak in rows]


def batch_cost(conn: psycopg.Connection, batch_id: int) -> CostRollup:
    """What the members of batch ``batch_id`` cost so far (zeros for no member left)."""
    found = _rollups(conn, _BATCH, {"batch": batch_id})
    return found[0][1] if found else CostRollup(0, 0, 0, 0, 0.0, 0.0, None, None)


def key_costs(conn: psycopg.Connection, window: float) -> dict[str, CostRollup]:
    """Per concurrency key, what its jobs finished in the last ``window`` seconds cost."""
    return dict(_rollups(conn, _KEYS, {"window": window}))
