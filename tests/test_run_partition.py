"""Two real supervisors share a global ``--max-running 2``; one of them is cut off from
PostgreSQL by a proxy that stops forwarding (a network partition: silence, no reset)
while the other still reaches it.

Before self-fencing the cut-off supervisor went on running the jobs it had started
after its job leases and its slice of the limit had expired: the other one then took
over the slice and rescued the jobs, so the cluster ran more than the limit and jobs
that had finished on the cut-off side ran again. Judged from the handlers' own records
(a beat every 0.1 s while a run lives), not from either supervisor's account.
"""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner
from e2e import Supervisor, read_log, wait_until
from netproxy import PartitionProxy
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.enqueue import enqueue_many
from supervisor.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LIMIT = 2
LEASE = 6.0


def runs(records: list[dict]) -> dict[tuple[int, int], tuple[float, float]]:
    """Each run (job id, child pid) as (first record, last record) wall-clock times."""
    spans: dict[tuple[int, int], tuple[float, float]] = {}
    for r in records:
        key = (r["id"], r["pid"])
        first, last = spans.get(key, (r["t"], r["t"]))
        spans[key] = (min(first, r["t"]), max(last, r["t"]))
    return spans


def peak(spans) -> int:
    """The most runs alive at once."""
    events = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()],
                    key=lambda ev: (ev[0], ev[1]))
    level = best = 0
    for _, step in events:
        level += step
        best = max(best, level)
    return best


def test_a_partitioned_supervisor_stops_before_its_leases_and_slice_expire(dsn, tmp_path):
    result = CliRunner().invoke(main, ["queues", "limit", "limited", "--max-running",
                                       str(LIMIT), "--dsn", dsn])
    assert result.exit_code == 0, result.output
    enqueue_many("hang_limited", [{"seconds": 8.0}] * 8, dsn=dsn, queue="limited")
    config = tmp_path / "supervisor.toml"
    config.write_text("database_deadline = 1.5\nstatement_timeout = 1.0\n"
                      "maintenance_interval = 0.5\npoll_interval = 0.2\n")
    params = conninfo_to_dict(dsn)
    proxy = PartitionProxy((params.get("host") or "127.0.0.1", int(params.get("port") or 5432)))
    log = tmp_path / "run.log"
    args = ("-n", str(LIMIT), "-q", "limited", "--lease-ttl", str(LEASE), "--config",
            str(config))
    cut_off = Supervisor(make_conninfo(dsn, host="127.0.0.1", port=proxy.port), *args,
                         log_path=log, app="hang_handlers")
    other = Supervisor(dsn, *args, log_path=log, app="hang_handlers")
    try:
        wait_until(lambda: any(r["ppid"] == cut_off.pid and r["event"] == "beat"
                               for r in read_log(log)), what="a job running on the cut-off side")
        proxy.blackhole()
        cut_at = time.time()
        wait_until(lambda: time.time() - cut_at > LEASE + 4, timeout=LEASE + 10,
                   interval=0.2, what="the partition to outlast the lease")
        proxy.heal()
        cut_off.wait_for_log("database connection restored", timeout=20)
        healed_at = time.time()
    finally:
        cut_off.stop()
        other.stop()
        proxy.close()
    records = read_log(log)
    spans = runs(records)
    assert peak(spans) <= LIMIT, (
        f"{peak(spans)} jobs ran at once against --max-running {LIMIT}: "
        f"{sorted(spans.items(), key=lambda kv: kv[1])}")
    ended: dict[int, float] = {}
    for r in records:
        if r["event"] == "end":
            ended.setdefault(r["id"], r["t"])
    again = [r for r in records if r["event"] == "start" and r["id"] in ended
             and r["t"] > ended[r["id"]]]
    assert not again, f"jobs that had finished ran again: {again}"
    cut_side = [r for r in records if r["ppid"] == cut_off.pid and cut_at < r["t"] < healed_at]
    assert not [r for r in cut_side if r["event"] == "end"], "a job ran to its end cut off"
    last = max((r["t"] for r in cut_side), default=cut_at)
    assert last - cut_at < LEASE, f"the cut-off side ran jobs {last - cut_at:.1f} s in"
    print(f"peak {peak(spans)} of {LIMIT}; the cut-off side's last beat "
          f"{last - cut_at:.2f} s into the partition (lease {LEASE:g} s)")


def test_while_cut_off_nothing_new_starts(dsn, tmp_path):
    """Short jobs queued in the children's pipes are not started once the database is
    known to be away: their outcomes could not be written, and past the lease they
    would be rescued and run again elsewhere. The connections are cut at once (so the
    pipes are full when the outage is known) and new ones go unanswered."""
    enqueue_many("hang_plain", [{"seconds": 0.05}] * 3000, dsn=dsn, queue="plain")
    config = tmp_path / "supervisor.toml"
    config.write_text("database_deadline = 1.5\nstatement_timeout = 1.0\n")
    params = conninfo_to_dict(dsn)
    proxy = PartitionProxy((params.get("host") or "127.0.0.1", int(params.get("port") or 5432)))
    log = tmp_path / "run.log"
    sup = Supervisor(make_conninfo(dsn, host="127.0.0.1", port=proxy.port), "-n", "2",
                     "-q", "plain", "--prefetch", "20", "--config", str(config), log_path=log,
                     app="hang_handlers")
    try:
        wait_until(lambda: len([r for r in read_log(log) if r["event"] == "start"]) > 40,
                   what="jobs flowing")
        proxy.sever()
        sup.wait_for_log("database connection lost", timeout=10)
        known_at = time.time()
        time.sleep(3.0)  # measuring: what starts over three seconds of the outage
        starts = [r for r in read_log(log) if r["event"] == "start" and r["t"] > known_at + 0.2]
    finally:
        sup.stop()
        proxy.close()
    # A child may have taken one more job before it read the recall: one per child.
    assert len(starts) <= 2, f"{len(starts)} jobs started while the database was away"
    print(f"{len(starts)} jobs started in the 3 s after the outage was known")
