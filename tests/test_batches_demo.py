"""``supervisor demo`` assembles its image in the batch's callback."""

import subprocess
import sys

import psycopg
import pytest
from e2e import ROOT

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_demo_writes_the_image_from_its_batch_callback(dsn, tmp_path):
    out = tmp_path / "m.png"
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", "demo", "-n", "2", "--size", "128x64",
         "--tile", "32", "--max-iter", "50", "--output", str(out), "--dsn", dsn],
        capture_output=True, text=True, timeout=100, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert "8/8 tiles" in proc.stdout
    assert out.read_bytes().startswith(b"\x89PNG")
    with psycopg.connect(dsn, autocommit=True) as conn:
        kind, result = conn.execute(
            "SELECT j.kind, j.result FROM supervisor.batches b "
            "JOIN supervisor.jobs j ON j.id = b.callback_id").fetchone()
    assert kind == "assemble_image" and result["tiles"] == 8
