"""The README's second example (tests/wordcount.py: split -> map -> merge along edges)
run for real: the script enqueues, a real ``supervisor run --burst`` with four children
runs the three steps, and the merge's result is the word count of the whole input; with
one count cancelled before it ran, the merge still runs (its edges allow failure) and
leaves that part out."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from e2e import ROOT, TESTS_DIR, Supervisor

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

TEXT = " ".join(f"w{i % 37} w{i % 11}" for i in range(3000))


def enqueue_pipeline(dsn: str, path: Path) -> int:
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    done = subprocess.run([sys.executable, str(TESTS_DIR / "wordcount.py"), str(path)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def run_burst(dsn: str) -> int:
    sup = Supervisor(dsn, "-n", "4", "--burst", "--discards-ok", app="wordcount")
    try:
        return sup.wait(timeout=180)
    finally:
        sup.stop()


def test_the_readme_pipeline_counts_every_word(dsn, conn, tmp_path):
    book = tmp_path / "book.txt"
    book.write_text(TEXT)
    last = enqueue_pipeline(dsn, book)
    assert run_burst(dsn) == 0
    state, result = conn.execute("SELECT state, result FROM supervisor.jobs WHERE id = %s",
                                 (last,)).fetchone()
    assert state == "completed"
    assert result == dict(Counter(TEXT.split()))
    kinds = dict(conn.execute("SELECT kind, count(*) FILTER (WHERE state = 'completed') "
                              "FROM supervisor.jobs GROUP BY kind").fetchall())
    assert kinds == {"split": 1, "count": 4, "merge": 1}


def test_a_failed_count_leaves_its_part_out_and_the_merge_runs(dsn, conn, tmp_path):
    book = tmp_path / "book.txt"
    book.write_text(TEXT)
    last = enqueue_pipeline(dsn, book)
    [(part,)] = conn.execute(
        "UPDATE supervisor.jobs SET state = 'cancelled', finished_at = now() "
        "WHERE id = (SELECT min(id) FROM supervisor.jobs WHERE kind = 'count') "
        "RETURNING (args->>'part')::int").fetchall()
    assert run_burst(dsn) == 0
    state, result = conn.execute("SELECT state, result FROM supervisor.jobs WHERE id = %s",
                                 (last,)).fetchone()
    assert state == "completed"
    words = TEXT.split()
    kept = [w for i in range(4) if i != part for w in words[i::4]]
    assert result == dict(Counter(kept))
