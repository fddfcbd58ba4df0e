"""``supervisor status`` and the dashboard say how many jobs wait for resources and
why: held back by a live supervisor (from its heartbeat) or beyond every budget."""

from __future__ import annotations

import orjson

from supervisor import admin
from supervisor.cli.status import render_text
from supervisor.dashboard.render import ENV

GIB = 1 << 30


def beat(conn, sup_id: str, children: int, admission: dict | None) -> None:
    info = {"kinds": ["k"]} | ({"admission": admission} if admission else {})
    conn.execute("INSERT INTO supervisor.supervisors (id, host, pid, queues, children, busy, "
                 "info) VALUES (%s, 'h', 1, ARRAY['default'], %s, 0, %s::jsonb)",
                 (sup_id, children, orjson.dumps(info).decode()))


def test_status_counts_held_back_and_too_big_jobs_with_the_reasons(conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, memory) VALUES ('k', %s)", (6 * GIB,))
    conn.execute("INSERT INTO supervisor.jobs (kind, cpus) VALUES ('k', 64)")
    conn.execute("INSERT INTO supervisor.jobs (kind, memory) VALUES ('k', %s)", (GIB,))
    beat(conn, "a", 4, {"cpus": 4, "memory": 4 * GIB, "source": "memory_budget",
                        "waiting": 1, "why": ["needs 3 CPUs, 1 free of 4"], "too_big": []})
    snapshot = admin.status(conn)
    waiting = snapshot["waiting_for_resources"]
    assert waiting["count"] == 3, waiting
    assert waiting["why"] == ["needs 3 CPUs, 1 free of 4", "needs 6144 MiB, budget 4096 MiB",
                              "needs 64 CPUs, budget 4"]
    text = render_text(snapshot)
    assert "waiting for resources: 3 jobs (needs 3 CPUs, 1 free of 4; needs 6144 MiB" in text
    html = ENV.get_template("queues.html").render(
        nav=[], path="/", read_only=True, refresh=0, notice=None, states=admin.COUNTED,
        hour_chart="", **(snapshot | {"totals": dict.fromkeys(admin.COUNTED, 0),
                                      "finished_age": 0}))
    assert "3 jobs wait for resources: needs 3 CPUs" in html


def test_a_supervisor_without_a_memory_budget_holds_any_memory(conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, memory) VALUES ('k', %s)", (6 * GIB,))
    beat(conn, "a", 4, None)
    assert admin.status(conn)["waiting_for_resources"] == {"count": 0, "why": []}
    assert "waiting for resources" not in render_text(admin.status(conn))


def test_status_and_the_dashboard_name_paused_kinds(conn):
    conn.execute("INSERT INTO supervisor.kind_pauses (kind, paused_until, reason) VALUES "
                 "('crashy', now() + interval '5 minutes', '11 crashes within 60 s'), "
                 "('old', now() - interval '1 minute', 'over')")
    snapshot = admin.status(conn)
    assert [k["kind"] for k in snapshot["paused_kinds"]] == ["crashy"]
    assert "kind crashy paused until" in render_text(snapshot)
    html = ENV.get_template("queues.html").render(
        nav=[], path="/", read_only=True, refresh=0, notice=None, states=admin.COUNTED,
        hour_chart="", **(snapshot | {"totals": dict.fromkeys(admin.COUNTED, 0),
                                      "finished_age": 0}))
    assert "Kind crashy is paused until" in html and "11 crashes within 60 s" in html
