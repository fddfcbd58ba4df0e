"""The dashboard's queues page and /api/queues show a queue's global limits."""

from __future__ import annotations

import json
import urllib.request

import psycopg
import pytest

pytest_plugins = ["dashboard_fixtures"]  # seeded, read_only

pytestmark = pytest.mark.timeout(60)


def test_queues_page_and_api_show_global_limits(seeded, read_only):
    with psycopg.connect(seeded[0], autocommit=True) as conn:
        conn.execute("INSERT INTO supervisor.queue_limits (queue, max_running, max_rate, "
                     "burst, per_key_max_running) VALUES ('images', 3, 20, 5, 1)")
    with urllib.request.urlopen(read_only.url + "/api/queues", timeout=10) as response:
        queues = {q["name"]: q for q in json.loads(response.read())["queues"]}
    assert queues["images"]["limits"] == {"max_running": 3, "max_rate": 20.0, "burst": 5,
                                          "per_key_max_running": 1}
    assert queues["email"]["limits"] is None
    with urllib.request.urlopen(read_only.url + "/", timeout=10) as response:
        html = response.read().decode()
    assert "running &le; 3" in html and "rate &le; 20.0/s (burst 5)" in html
    assert "per key &le; 1" in html
