"""The admission book with fakes, the budget from a fake cgroup, and each kind's default
memory read from the usage column (written here with SQL, as the usage work fills it)."""

from __future__ import annotations

from collections import deque

from shared.jobs import ClaimedJob
from shared.memlimit import cgroup_memory_limit
from supervisor.admission import Admission, Budget, make_budget
from supervisor.db import Store
from supervisor.db.sql import KIND_MEMORY_P95

MIB = 1 << 20


def claimed(job_id: int, kind: str = "k", cpus: int | None = None,
            memory: int | None = None) -> ClaimedJob:
    return ClaimedJob(id=job_id, kind=kind, queue="q", attempt=1, max_attempts=3,
                      priority=0, timeout=None, args_json="{}", cpus=cpus, memory=memory)


def test_nothing_declared_and_no_budget_leaves_the_book_disengaged():
    book = Admission(Budget(4, None, "test"), patience=30)
    assert book.claimed([claimed(1), claimed(2)]) == []
    assert not book.engaged and book.need(claimed(1)) is None


def test_memory_charges_add_up_to_the_budget_and_free_on_release():
    book = Admission(Budget(4, 1024 * MIB, "test"), patience=30)
    big = [claimed(i, memory=600 * MIB) for i in (1, 2)]
    book.claimed(big)
    assert book.engaged
    assert book.choose(deque(big), free=4, now=0.0) == 0
    book.charge(big[0])
    assert book.choose(deque(big[1:]), free=3, now=0.0) is None
    assert book.waiting_why[2] == "needs 600 MiB, 600 MiB of 1024 MiB held"
    book.release(1)
    assert book.memory_held == 0 and book.choose(deque(big[1:]), free=4, now=0.0) == 0


def test_a_multi_cpu_job_keeps_children_free_and_smaller_jobs_overtake_until_patience():
    book = Admission(Budget(4, None, "test"), patience=5)
    wide, small = claimed(1, cpus=3), claimed(2)
    book.claimed([wide, small])
    assert book.choose(deque([wide, small]), free=2, now=0.0) == 1  # small overtakes
    assert book.choose(deque([wide, small]), free=2, now=4.9) == 1
    assert book.choose(deque([wide, small]), free=2, now=5.0) is None  # patience is up
    assert book.choose(deque([wide, small]), free=3, now=6.0) == 0
    book.charge(wide)
    assert book.extra_cpus == 2


def test_a_job_beyond_the_whole_budget_goes_back_and_later_claims_are_bounded():
    book = Admission(Budget(2, 256 * MIB, "test"), patience=30)
    assert book.bounds() is None
    beyond = book.claimed([claimed(1, memory=1 << 30), claimed(2, cpus=8), claimed(3)])
    assert [j.id for j in beyond] == [1, 2]
    assert book.too_big[1] == "needs 1024 MiB, budget 256 MiB"
    assert book.too_big[2] == "needs 8 CPUs, budget 2"
    assert book.bounds() == (2, 256 * MIB, {})  # and no counted resources


def test_the_kinds_default_memory_applies_only_under_a_memory_budget():
    with_budget = Admission(Budget(4, 1 << 30, "test"), patience=30)
    with_budget.kind_memory = {"k": 300 * MIB}
    with_budget.claimed([claimed(1)])  # 4 x 300 MiB do not fit 1 GiB: the book is needed
    assert with_budget.engaged and with_budget.need(claimed(1)).memory == 300 * MIB
    assert with_budget.need(claimed(2, memory=5 * MIB)).memory == 5 * MIB
    without = Admission(Budget(4, None, "test"), patience=30)
    without.kind_memory = {"k": 300 * MIB}
    assert not without.engaged and without.need(claimed(1)) is None


def test_budget_from_a_fake_cgroup_less_rss_and_margin(tmp_path):
    (tmp_path / "memory.max").write_text(f"{4 << 30}\n")
    limit = cgroup_memory_limit(str(tmp_path))
    assert limit is not None and limit.bytes == 4 << 30
    budget = make_budget(4, None, cgroup_root=str(tmp_path), parent_rss=100 * MIB)
    margin = max(64 * MIB, int((4 << 30) * 0.05))
    assert budget.memory == (4 << 30) - 100 * MIB - margin
    (tmp_path / "memory.max").write_text("max\n")
    assert make_budget(4, None, cgroup_root=str(tmp_path)).memory is None
    assert make_budget(4, 1 << 30, cgroup_root=str(tmp_path)).memory == 1 << 30


def test_each_kinds_default_memory_is_the_p95_of_recent_usage_once_20_samples_the_largest_before(
        conn):
    store = Store(conn, "test-owner")
    assert store.save_kind_memory({
        "enough": [(i + 1) * MIB for i in range(100)],
        "few": [50 * MIB] * 18 + [600 * MIB]}) == 2  # issue 51: one measured job is enough
    found = store.kind_memory_p95(["enough", "few", "none"])
    assert found == {"enough": 95 * MIB, "few": 600 * MIB}


def test_a_kinds_peak_counts_below_20_samples_the_newest_200_count_a_day_old_row_is_replaced(
        conn):
    store = Store(conn, "test-owner")
    store.save_kind_memory({"few": [300 * MIB] * 5, "killed_only": [700 * MIB]})
    store.save_kind_memory({"few": [900 * MIB]})
    found = store.kind_memory_p95(["few", "killed_only", "none"])
    assert found == {"few": 900 * MIB, "killed_only": 700 * MIB}
    store.save_kind_memory({"killed_only": [500 * MIB]})  # a peak within a day only rises
    assert store.kind_memory_p95(["killed_only"]) == {"killed_only": 700 * MIB}
    conn.execute("UPDATE supervisor.kind_memory SET updated_at = now() - interval '2 days'")
    assert store.kind_memory_p95(["killed_only"]) == {}  # too old to count
    store.save_kind_memory({"killed_only": [500 * MIB]})  # and replaced, not raised
    assert store.kind_memory_p95(["killed_only"]) == {"killed_only": 500 * MIB}
    # 150 big ones, then 100 small ones from another supervisor: the newest 200 count
    store.save_kind_memory({"many": [900 * MIB] * 150})
    store.save_kind_memory({"many": [(i + 1) * MIB for i in range(100)]})
    (kept,) = conn.execute("SELECT recent_rss FROM supervisor.kind_memory "
                           "WHERE kind = 'many'").fetchone()
    assert len(kept) == 200 and kept[:3] == [100 * MIB, 99 * MIB, 98 * MIB]
    assert store.kind_memory_p95(["many"]) == {"many": 900 * MIB}  # 100 of 200 are big
    store.save_kind_memory({"many": [MIB] * 100})  # the big ones drop out
    assert store.kind_memory_p95(["many"]) == {"many": 90 * MIB}


def test_reading_each_kinds_size_reads_no_job_row(conn):
    """Under a held MVCC horizon the jobs table swells by hundreds of MB (issue 40); the
    once-a-minute reading of the kinds' sizes runs on the loop's own connection, so it
    must not read it at all."""
    conn.execute("SET plan_cache_mode = force_custom_plan")
    plan = conn.execute(b"EXPLAIN (FORMAT JSON) " + KIND_MEMORY_P95.encode(),
                        {"kinds": ["a", "b"]}).fetchone()[0]

    def relations(node: dict) -> set[str]:
        found = {node["Relation Name"]} if "Relation Name" in node else set()
        for child in node.get("Plans", ()):
            found |= relations(child)
        return found

    assert relations(plan[0]["Plan"]) == {"kind_memory"}


def test_a_memory_budget_engages_the_book_only_while_it_can_refuse_a_start():
    # 4 children, 1 GiB: kinds of up to 256 MiB can never be refused, 4 at a time.
    book = Admission(Budget(4, 1024 * MIB, "test"), patience=30)
    book.measured({"a": 100 * MIB, "huge": 900 * MIB})  # "huge" never comes here
    assert not book.engaged  # nothing claimed yet
    book.claimed([claimed(1, kind="a"), claimed(2, kind="b")])
    assert book.engaged  # "b" is unmeasured: its first job runs with caution
    book.measured({"b": 256 * MIB})
    assert not book.engaged and book.need(claimed(3, kind="b")).memory == 256 * MIB
    book.learned(claimed(4, kind="a"), 300 * MIB)  # 4 x 300 MiB no longer fit
    assert book.engaged
    book.measured({"a": 200 * MIB})  # the database's p95 over every supervisor replaces it
    assert not book.engaged
    book.learned(claimed(5, kind="b"), 100 * MIB, memory_failure=True)  # retried alone
    assert book.engaged


def test_a_declared_reservation_engages_the_book_whatever_the_sizes():
    book = Admission(Budget(4, 1024 * MIB, "test"), patience=30)
    book.measured({"a": 10 * MIB})
    book.claimed([claimed(1, kind="a")])
    assert not book.engaged
    book.claimed([claimed(2, kind="a", cpus=2)])
    assert book.engaged
