"""Admission in a container (issue 51), with a fake cgroup (v2 files under a temporary
root, as ``SUPERVISOR_CGROUP_ROOT`` points the real code at): a new kind's first jobs
one at a time, sizes learned from each attempt, the container's usage as ground truth,
a job that failed for memory retried alone; and the cgroup readers for v1 and v2."""

from __future__ import annotations

from pathlib import Path

from shared.jobs import ClaimedJob
from shared.memlimit import ContainerMemory, container_memory
from supervisor.admission import Admission, Budget, make_budget

MIB = 1 << 20
GIB = 1 << 30


def claimed(job_id: int, kind: str = "k", memory: int | None = None) -> ClaimedJob:
    return ClaimedJob(id=job_id, kind=kind, queue="q", attempt=1, max_attempts=3,
                      priority=0, timeout=None, args_json="{}", memory=memory)


def v2_cgroup(root: Path, limit: int = GIB, current: int = 100 * MIB,
              inactive_file: int = 0, active_file: int = 0,
              oom_kill: int = 0) -> ContainerMemory:
    """A cgroup v2 directory with its memory files, as the kernel writes them."""
    (root / "memory.max").write_text(f"{limit}\n")
    (root / "memory.current").write_text(f"{current}\n")
    (root / "memory.stat").write_text(
        f"anon {current}\nfile {inactive_file + active_file}\nshmem 0\n"
        f"active_anon 0\ninactive_file {inactive_file}\nactive_file {active_file}\n")
    (root / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom {oom_kill}\n"
                                        f"oom_kill {oom_kill}\noom_group_kill 0\n")
    found = container_memory(str(root))
    assert found is not None
    return found


def book_in(container: ContainerMemory) -> Admission:
    return Admission(Budget(2, 900 * MIB, "test", container=container), patience=30)


def test_the_v2_files_give_the_limit_the_working_set_and_the_oom_kills(tmp_path):
    container = v2_cgroup(tmp_path, current=500 * MIB, inactive_file=100 * MIB,
                          active_file=50 * MIB, oom_kill=2)
    assert (container.version, container.limit) == (2, GIB)
    assert container.usage() == 350 * MIB  # the page cache is reclaimed before a kill
    assert container.oom_kills() == 2
    assert container.source == f"cgroup memory.max {GIB}"


def test_the_v1_files_give_the_same(tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "memory.limit_in_bytes").write_text(f"{GIB}\n")
    (memory / "memory.usage_in_bytes").write_text(f"{300 * MIB}\n")
    (memory / "memory.stat").write_text(f"cache 0\ninactive_file {MIB}\n"
                                        f"total_inactive_file {50 * MIB}\n"
                                        f"total_active_file {20 * MIB}\n")
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n"
                                               "oom_kill 4\n")
    container = container_memory(str(tmp_path))
    assert container is not None and container.version == 1
    assert (container.limit, container.usage(), container.oom_kills()) == (
        GIB, 230 * MIB, 4)


def test_a_budget_from_the_flag_still_reads_the_container(tmp_path):
    v2_cgroup(tmp_path)
    budget = make_budget(2, 512 * MIB, cgroup_root=str(tmp_path))
    assert budget.memory == 512 * MIB and budget.container is not None
    assert budget.ceiling == GIB - 64 * MIB


def test_a_new_kinds_jobs_start_one_at_a_time_until_one_is_measured(tmp_path):
    book = book_in(v2_cgroup(tmp_path))
    first, second, other = claimed(1), claimed(2), claimed(3, kind="other")
    assert not book.engaged  # nothing claimed yet: no kind can bind
    book.claimed([first, second, other])
    assert book.engaged  # claimed kinds without a measured size
    assert book.choose([first], free=2, now=0.0) == 0
    book.charge(first)
    assert book.choose([second, other], free=1, now=0.1) is None
    assert "not measured yet" in book.waiting_why[2]
    book.learned(first, 630 * MIB)
    book.release(first.id)
    assert book.need(second).memory == 630 * MIB
    assert book.choose([second], free=2, now=0.2) == 0


def test_learned_sizes_only_rise_here_and_the_database_fills_what_is_unknown(tmp_path):
    book = book_in(v2_cgroup(tmp_path))
    book.learned(claimed(1), 600 * MIB)
    book.learned(claimed(2), 300 * MIB)
    assert book.kind_memory == {"k": 600 * MIB}
    book.measured({"other": 50 * MIB})
    assert book.kind_memory == {"k": 600 * MIB, "other": 50 * MIB}
    book.measured({"k": 620 * MIB})
    assert book.kind_memory["k"] == 620 * MIB


def test_two_learned_600_mib_jobs_never_run_together(tmp_path):
    book = book_in(v2_cgroup(tmp_path))
    book.measured({"k": 630 * MIB})
    first, second = claimed(1), claimed(2)
    assert book.choose([first], free=2, now=0.0) == 0
    book.charge(first)
    assert book.choose([second], free=1, now=0.1) is None
    assert book.waiting_why[2] == "needs 630 MiB, 630 MiB of 900 MiB held"


def test_the_containers_usage_holds_back_what_would_pass_its_ceiling(tmp_path):
    container = v2_cgroup(tmp_path, current=100 * MIB)
    book = book_in(container)
    book.measured({"small": 10 * MIB, "mid": 300 * MIB})
    running = claimed(1, kind="small")
    assert book.choose([running], free=2, now=0.0) == 0
    book.charge(running)
    # Something nobody declared (a sidecar, a job's subprocess) took the container.
    (tmp_path / "memory.current").write_text(f"{800 * MIB}\n")
    mid = claimed(2, kind="mid")
    assert book.choose([mid], free=1, now=1.0) is None
    assert "the container uses 800 MiB" in book.waiting_why[2]
    (tmp_path / "memory.current").write_text(f"{300 * MIB}\n")
    assert book.choose([mid], free=1, now=2.0) == 0


def test_alone_a_job_starts_whatever_the_containers_baseline(tmp_path):
    book = book_in(v2_cgroup(tmp_path, current=800 * MIB))
    book.measured({"k": 300 * MIB})
    assert book.choose([claimed(1)], free=2, now=0.0) == 0


def test_a_job_that_failed_for_memory_is_retried_alone(tmp_path):
    book = book_in(v2_cgroup(tmp_path))
    job = claimed(7)
    book.learned(job, 200 * MIB, memory_failure=True)
    assert book.need(job).memory == 900 * MIB  # the whole budget
    assert book.need(claimed(8)).memory == 200 * MIB
    declared = claimed(9, memory=100 * MIB)
    book.learned(declared, 200 * MIB, memory_failure=True)
    assert book.need(declared).memory == 100 * MIB  # a declaration stands


def test_without_a_memory_budget_nothing_is_learned():
    book = Admission(Budget(2, None, "test"), patience=30)
    book.learned(claimed(1), 600 * MIB, memory_failure=True)
    assert book.kind_memory == {} and not book.engaged and book.need(claimed(1)) is None


def test_a_kind_measured_past_the_whole_budget_runs_alone_rather_than_never(tmp_path):
    book = book_in(v2_cgroup(tmp_path))
    book.measured({"huge": 1500 * MIB, "small": 10 * MIB})
    huge = claimed(1, kind="huge")
    assert book.claimed([huge]) == []  # undeclared: not given back as too big
    assert book.need(huge).memory == 900 * MIB
    assert book.choose([huge], free=2, now=0.0) == 0
    book.charge(huge)
    assert book.choose([claimed(2, kind="small")], free=1, now=0.1) is None


def test_an_unmeasured_job_reserves_its_childs_share_so_a_big_job_waits_beside_it(tmp_path):
    book = book_in(v2_cgroup(tmp_path))  # budget 900 MiB over 2 children: 450 each
    book.measured({"big": 630 * MIB, "small": 10 * MIB})
    new = claimed(1, kind="new")
    assert book.need(new).memory == 450 * MIB and not book.need(new).measured
    assert book.choose([new], free=2, now=0.0) == 0
    book.charge(new)
    big, small = claimed(2, kind="big"), claimed(3, kind="small")
    assert book.choose([big, small], free=1, now=0.1) == 1  # the small one overtakes
    assert book.waiting_why[2] == "needs 630 MiB, 450 MiB of 900 MiB held"


def test_each_attempts_peak_is_handed_over_once_and_kept_when_not_written(tmp_path):
    book = book_in(v2_cgroup(tmp_path))
    book.learned(claimed(1), 300 * MIB)
    book.learned(claimed(2), 200 * MIB)  # lower: the kind's size did not rise, a sample
    assert book.kind_memory == {"k": 300 * MIB}
    assert book.take_unsaved() == {"k": [300 * MIB, 200 * MIB]}
    assert book.take_unsaved() == {}
    book.learned(claimed(3), 100 * MIB)
    book.not_saved({"k": [300 * MIB, 200 * MIB]})  # the database was away: kept, first
    book.learned(claimed(4, kind="other"), 50 * MIB)
    assert book.take_unsaved() == {"k": [300 * MIB, 200 * MIB, 100 * MIB],
                                   "other": [50 * MIB]}
    for job_id in range(300):  # as many as the database keeps, the newest
        book.learned(claimed(job_id), (job_id + 1) * MIB)
    (kept,) = book.take_unsaved().values()
    assert len(kept) == 200 and kept[0] == 101 * MIB and kept[-1] == 300 * MIB
