"""Metrics: the text exposition format of the registry, the supervisor's metrics, and the
selector-driven HTTP server scraped over real sockets by a client in another thread."""

from __future__ import annotations

import re
import selectors
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from shared.jobs import FAIL_ERROR, FAIL_SHUTDOWN, FAIL_TIMEOUT, ClaimedJob
from supervisor.observe.exposition import Registry
from supervisor.observe.httpserver import CONTENT_TYPE, MAX_REQUEST, MetricsServer
from supervisor.observe.metrics import SupervisorMetrics

_SAMPLE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})?'
    r" (-?[0-9.e+-]+|\+Inf|-Inf|NaN)"
)


def parse(text: str) -> dict[str, str]:
    """Check every line against the 0.0.4 grammar (TYPE before samples, each sample of a
    declared family) and return ``{"name{labels}": value}``."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    samples: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            assert name not in types, f"family declared twice: {line}"
            types[name] = kind
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, f"not a sample line: {line!r}"
        name = match.group(1)
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or types.get(family) == "histogram", f"undeclared: {line}"
        key = name + (match.group(2) or "")
        assert key not in samples, f"duplicate sample: {line}"
        samples[key] = match.group(3)
    return samples


def job(queue: str = "images", kind: str = "resize") -> ClaimedJob:
    return ClaimedJob(1, kind, queue, 1, 5, 0, None, "{}", wait_seconds=0.25)


# --- registry and format ---------------------------------------------------------------


def test_render_help_type_and_samples_exactly():
    reg = Registry()
    c = reg.counter("app_things_total", "Things done.\nSecond line \\ here.", ["queue"])
    g = reg.gauge("app_up", "Up or not.")
    c.inc(queue="b")
    c.inc(2, queue="a")
    c.inc(queue="a")
    g.set(1)
    assert reg.render() == (
        b"# HELP app_things_total Things done.\\nSecond line \\\\ here.\n"
        b"# TYPE app_things_total counter\n"
        b'app_things_total{queue="a"} 3\n'
        b'app_things_total{queue="b"} 1\n'
        b"# HELP app_up Up or not.\n"
        b"# TYPE app_up gauge\n"
        b"app_up 1\n"
    )


def test_metric_without_labels_renders_zero_before_any_sample():
    reg = Registry()
    reg.counter("a_total", "A.")
    reg.histogram("b_seconds", "B.", buckets=[1])
    samples = parse(reg.render().decode())
    assert samples["a_total"] == "0"
    assert samples['b_seconds_bucket{le="+Inf"}'] == "0"
    assert samples["b_seconds_count"] == "0"


def test_label_values_are_escaped():
    reg = Registry()
    c = reg.counter("x_total", "X.", ["path"])
    c.inc(path='C:\\dir "quoted"\nnext')
    text = reg.render().decode()
    assert 'x_total{path="C:\\\\dir \\"quoted\\"\\nnext"} 1\n' in text
    parse(text)


def test_histogram_buckets_are_cumulative_with_inf_sum_and_count():
    reg = Registry()
    h = reg.histogram("d_seconds", "D.", ["queue"], buckets=[1, 2, 5])
    for value in (0.5, 1, 1.5, 7):  # 1 sits on a bound: le means <=
        h.observe(value, queue="q")
    samples = parse(reg.render().decode())
    assert samples['d_seconds_bucket{queue="q",le="1.0"}'] == "2"
    assert samples['d_seconds_bucket{queue="q",le="2.0"}'] == "3"
    assert samples['d_seconds_bucket{queue="q",le="5.0"}'] == "3"
    assert samples['d_seconds_bucket{queue="q",le="+Inf"}'] == "4"
    assert samples['d_seconds_sum{queue="q"}'] == "10"
    assert samples['d_seconds_count{queue="q"}'] == "4"
    assert h.value(queue="q") == (4, 10.0)


def test_counters_are_kept_per_label_set():
    reg = Registry()
    c = reg.counter("j_total", "J.", ["queue", "kind"])
    c.inc(queue="a", kind="x")
    c.inc(queue="a", kind="y")
    c.inc(5, kind="x", queue="a")  # keyword order does not matter
    assert c.value(queue="a", kind="x") == 6
    assert c.value(queue="a", kind="y") == 1
    assert c.value(queue="b", kind="x") == 0


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "é"])
def test_invalid_metric_names_are_refused(name):
    with pytest.raises(ValueError, match="invalid metric name"):
        Registry().counter(name, "help")


@pytest.mark.parametrize("label", ["1a", "a-b", "__reserved", "a:b"])
def test_invalid_label_names_are_refused(label):
    with pytest.raises(ValueError, match="invalid label name"):
        Registry().counter("ok_total", "help", [label])


def test_misuse_is_refused():
    reg = Registry()
    c = reg.counter("c_total", "C.", ["queue"])
    with pytest.raises(ValueError, match="already registered"):
        reg.gauge("c_total", "again")
    with pytest.raises(ValueError, match="takes labels"):
        c.inc()
    with pytest.raises(ValueError, match="takes labels"):
        c.inc(queue="a", kind="extra")
    with pytest.raises(ValueError, match="takes labels"):
        c.inc(kind="wrong")
    with pytest.raises(ValueError, match="cannot decrease"):
        c.inc(-1, queue="a")
    with pytest.raises(ValueError, match="'le'"):
        reg.histogram("h", "H.", ["le"], buckets=[1])
    with pytest.raises(ValueError, match="increasing"):
        reg.histogram("h2", "H.", buckets=[2, 1])
    with pytest.raises(ValueError, match="duplicate label"):
        reg.counter("d_total", "D.", ["a", "a"])


# --- the supervisor's metrics ----------------------------------------------------------


def test_supervisor_metrics_record_a_job_lifecycle():
    m = SupervisorMetrics("host-1:4242", version="9.9")
    m.claimed("images", 2, 0.002, [0.25, 30.0])
    m.claimed("images", 0, 0.001)
    m.job_done(job(), 0.2)
    m.job_failed(job(), FAIL_TIMEOUT, retried=True, discarded=False, duration=3.0)
    m.job_failed(job(), FAIL_ERROR, retried=False, discarded=True, duration=0.01)
    m.job_failed(job(), FAIL_SHUTDOWN, retried=False, discarded=False)
    m.released("images", 3)
    m.children(busy=3, idle=1)
    m.child_exit("recycle")
    m.child_exit("recycle")
    m.fenced("complete", 2)
    m.renewed(7)
    m.database_up(True)

    s = parse(m.render().decode())
    assert s['supervisor_jobs_claimed_total{queue="images"}'] == "2"
    assert s['supervisor_jobs_completed_total{queue="images",kind="resize"}'] == "1"
    failed = 'supervisor_jobs_failed_total{queue="images",kind="resize",reason="%s"}'
    assert s[failed % "timeout"] == s[failed % "error"] == s[failed % "shutdown"] == "1"
    assert s['supervisor_jobs_retried_total{queue="images",kind="resize"}'] == "1"
    assert s['supervisor_jobs_discarded_total{queue="images",kind="resize",reason="error"}'] == "1"
    assert s['supervisor_jobs_released_total{queue="images"}'] == "3"
    # Three attempts with a known duration: done, timeout, error; shutdown had none.
    assert s['supervisor_job_duration_seconds_count{queue="images",kind="resize"}'] == "3"
    assert s['supervisor_job_wait_seconds_count{queue="images"}'] == "2"
    assert s['supervisor_job_wait_seconds_bucket{queue="images",le="10.0"}'] == "1"
    assert s["supervisor_claim_seconds_count"] == "2"
    assert s['supervisor_children{state="busy"}'] == "3"
    assert s['supervisor_children{state="idle"}'] == "1"
    assert s['supervisor_children_exits_total{reason="recycle"}'] == "2"
    assert s['supervisor_fenced_writes_total{operation="complete"}'] == "2"
    assert s["supervisor_lease_renewals_total"] == "7"
    assert s["supervisor_database_up"] == "1"
    assert s['supervisor_info{owner="host-1:4242",version="9.9"}'] == "1"
    assert all(key.startswith("supervisor_") for key in s)


def test_supervisor_metrics_start_at_zero_with_database_down():
    s = parse(SupervisorMetrics("o").render().decode())
    assert s["supervisor_database_up"] == "0"
    assert s['supervisor_children{state="busy"}'] == "0"
    assert s["supervisor_lease_renewals_total"] == "0"
    m = SupervisorMetrics("o")
    m.database_up(True)
    m.database_up(False)
    assert parse(m.render().decode())["supervisor_database_up"] == "0"


def test_kinds_past_the_cap_share_one_label_value_and_the_scrape_stays_small():
    m = SupervisorMetrics("o", version="1", max_kinds=10)
    for i in range(2000):
        job = ClaimedJob(i, f"kind_{i}", "q", 1, 5, 0, None, "{}")
        m.job_done(job, 0.01)
        m.job_failed(job, FAIL_ERROR, retried=True, discarded=False, duration=0.01)
    text = m.render().decode()
    kinds = set(re.findall(r'kind="([^"]+)"', text))
    assert kinds == {f"kind_{i}" for i in range(10)} | {"other"}
    assert 'supervisor_jobs_completed_total{queue="q",kind="other"} 1990' in text
    assert len(text) < 60_000, len(text)


def test_a_child_killed_for_a_timeout_is_one_exit_not_two():
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.reporting import OutcomeReporter
    from supervisor.pool import ChildEvent

    m = SupervisorMetrics("o", version="1")
    reporter = OutcomeReporter(Ledger(), Outbox(m, 0.02), m)
    reporter.record([ChildEvent(7, 1, "killed", "ran past its 1 s timeout"),
                     ChildEvent(7, 1, "exited", "killed by SIGTERM"),
                     ChildEvent(8, 2, "exited", "exited with code 3")], 0.0)
    text = m.render().decode()
    assert 'supervisor_children_exits_total{reason="killed"} 1' in text
    assert 'supervisor_children_exits_total{reason="exited"} 1' in text


def test_job_cpu_seconds_counts_each_attempt_a_child_measured():
    from shared.usage import Usage
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.reporting import OutcomeReporter
    from supervisor.pool import JobDone, JobFailed

    m = SupervisorMetrics("o", version="1")
    reporter = OutcomeReporter(Ledger(), Outbox(m, 0.02), m)
    reporter.record([
        JobDone(job(), "null", 0.3, Usage(0.2, 0.3, 1 << 20)),
        JobFailed(job(), FAIL_ERROR, "boom", None, None, False, 2.0, Usage(1.5, 2.0, 1)),
        JobFailed(job(), FAIL_TIMEOUT, "ran past", None, None, False, 9.0),  # no usage
    ], 0.0)
    s = parse(m.render().decode())
    key = 'supervisor_job_cpu_seconds_%s{queue="images",kind="resize"}'
    assert s[key % "count"] == "2" and float(s[key % "sum"]) == pytest.approx(1.7)
    assert s['supervisor_job_cpu_seconds_bucket{queue="images",kind="resize",le="0.5"}'] == "1"


def test_a_failure_is_retried_or_discarded_not_both():
    with pytest.raises(ValueError):
        SupervisorMetrics("o").job_failed(job(), FAIL_ERROR, retried=True, discarded=True)


# --- the HTTP server in a selector loop ------------------------------------------------


class Loop:
    """The parent's loop in miniature: one selector, a wakeup socket, the server."""

    def __init__(self, render=None, **kwargs):
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = socket.socketpair()
        self.sel.register(self.wake_r, selectors.EVENT_READ, data="wake")
        self.metrics = SupervisorMetrics("test-owner", version="1")
        render = render or self.metrics.render
        self.server = MetricsServer(0, render, self.sel, host="127.0.0.1", **kwargs)
        self.url = f"http://127.0.0.1:{self.server.port}"
        self.problem = None  # what the loop reports to /healthz each turn

    def turn(self, timeout):
        """One loop turn; returns True when the client thread has signalled it is done."""
        deadline = self.server.next_deadline()
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
        woken = False
        self.server.report(time.monotonic(), self.problem)
        for key, mask in self.sel.select(timeout):
            if key.data is self.server:
                self.server.handle_event(key, mask)
            elif key.data == "wake":
                self.wake_r.recv(1)
                woken = True
        self.server.tick()
        return woken

    def run(self, client, limit=15.0):
        """Run ``client()`` in a thread while this thread turns the loop; its result."""
        box = {}

        def target():
            try:
                box["value"] = client()
            except BaseException as exc:
                box["error"] = exc
            finally:
                self.wake_w.send(b"x")

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        end = time.monotonic() + limit
        while not self.turn(end - time.monotonic()):
            assert time.monotonic() < end, "client did not finish"
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def until(self, predicate, limit=15.0):
        end = time.monotonic() + limit
        while not predicate():
            assert time.monotonic() < end, "condition not reached"
            self.turn(end - time.monotonic())

    def close(self):
        self.server.close()
        self.sel.close()
        self.wake_r.close()
        self.wake_w.close()


@pytest.fixture
def loop():
    lp = Loop()
    yield lp
    lp.close()


def get(url, method="GET", data=None):
    """(status, content type, body) of one request; HTTP errors are answers too."""
    request = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers["Content-Type"], err.read()


def raw(port, payload, *, reset=False):
    """Send ``payload`` on a fresh connection and return all bytes answered before EOF
    (or None after a reset by the server); with ``reset``, abort the connection with RST."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return b""
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            return None
        return b"".join(chunks)


def test_scrape_shows_the_counts(loop):
    loop.metrics.job_done(job(), 0.05)
    loop.metrics.job_done(job(), 0.05)
    loop.metrics.child_exit("crashed")
    status, ctype, body = loop.run(lambda: get(loop.url + "/metrics"))
    assert status == 200
    assert ctype == CONTENT_TYPE
    s = parse(body.decode())
    assert s['supervisor_jobs_completed_total{queue="images",kind="resize"}'] == "2"
    assert s['supervisor_children_exits_total{reason="crashed"}'] == "1"
    # Values recorded between scrapes show up in the next one.
    loop.metrics.job_done(job(), 0.05)
    s = parse(loop.run(lambda: get(loop.url + "/metrics?x=1"))[2].decode())
    assert s['supervisor_jobs_completed_total{queue="images",kind="resize"}'] == "3"
    loop.until(lambda: loop.server.connections == 0)


def test_health_not_found_and_method_not_allowed(loop):
    for path in ("/", "/healthz"):
        status, _, body = loop.run(lambda p=path: get(loop.url + p))
        assert (status, body.startswith(b"ok")) == (200, True)
    assert loop.run(lambda: get(loop.url + "/nope"))[0] == 404
    assert loop.run(lambda: get(loop.url + "/metrics", method="POST", data=b"x=1"))[0] == 405
    assert loop.run(lambda: get(loop.url + "/metrics", method="DELETE"))[0] == 405


def test_healthz_is_503_with_the_reason_while_the_loop_reports_a_problem(loop):
    loop.problem = "the database does not answer"
    status, _, body = loop.run(lambda: get(loop.url + "/healthz"))
    assert status == 503 and b"the database does not answer" in body
    loop.problem = None
    assert loop.run(lambda: get(loop.url + "/healthz"))[0] == 200


def test_healthz_fails_when_the_loop_stopped_reporting(loop):
    now = time.monotonic()
    loop.server.report(now, None)
    assert loop.server.health(now + 1.0) is None
    assert "has not turned" in loop.server.health(now + 60.0)


def test_a_silent_client_does_not_block_scrapes_and_is_dropped_at_its_deadline():
    lp = Loop(timeout=0.5)
    try:
        silent = socket.create_connection(("127.0.0.1", lp.server.port), timeout=10)
        lp.until(lambda: lp.server.connections == 1)
        status = lp.run(lambda: get(lp.url + "/metrics"))[0]
        assert status == 200
        assert lp.server.connections in (1, 2)  # the scraper's may still be closing
        # The loop wakes by next_deadline() on its own and drops the silent one.
        lp.until(lambda: lp.server.connections == 0)
        assert silent.recv(1) == b""
        silent.close()
    finally:
        lp.close()


def test_tick_drops_connections_past_the_default_five_seconds(loop):
    idle = socket.create_connection(("127.0.0.1", loop.server.port), timeout=10)
    loop.until(lambda: loop.server.connections == 1)
    loop.server.tick(time.monotonic() + 4)
    assert loop.server.connections == 1
    loop.server.tick(time.monotonic() + 5.01)
    assert loop.server.connections == 0
    assert idle.recv(1) == b""
    idle.close()


@pytest.fixture
def patient_loop():
    # A deadline far beyond the test's, so that only the size cap can end a connection.
    lp = Loop(timeout=60)
    yield lp
    lp.close()


def test_garbage_oversize_and_resets_do_not_raise(patient_loop):
    loop = patient_loop
    port = loop.server.port
    answer = loop.run(lambda: raw(port, b"\x00\xff\xfe garbage\r\n\r\n"))
    assert answer.startswith(b"HTTP/1.0 400 ")
    answer = loop.run(lambda: raw(port, b"GET /metrics\r\n\r\n"))  # no version
    assert answer.startswith(b"HTTP/1.0 400 ")
    # A head past the cap is dropped without an answer (EOF, or RST for unread input).
    answer = loop.run(lambda: raw(port, b"GET /metrics HTTP/1.0\r\nX: " + b"a" * MAX_REQUEST))
    assert not answer
    loop.run(lambda: raw(port, b"GET /met", reset=True))
    loop.run(lambda: raw(port, b"", reset=True))
    loop.until(lambda: loop.server.connections == 0)
    assert loop.run(lambda: get(loop.url + "/metrics"))[0] == 200


def test_a_failing_render_answers_500_and_the_loop_goes_on():
    def broken():
        raise RuntimeError("bug in a metric")

    lp = Loop(render=broken)
    try:
        assert lp.run(lambda: get(lp.url + "/metrics"))[0] == 500
        assert lp.run(lambda: get(lp.url + "/healthz"))[0] == 200
    finally:
        lp.close()


def test_a_large_body_is_written_across_many_write_events():
    body = b"x" * (16 * 1024 * 1024)  # beyond any loopback socket buffer
    lp = Loop(render=lambda: body)
    try:
        status, _, got = lp.run(lambda: get(lp.url + "/metrics"))
        assert status == 200
        assert got == body
    finally:
        lp.close()


def test_port_in_use_is_a_clear_oserror(loop):
    with pytest.raises(OSError, match=f"port {loop.server.port} on 127.0.0.1 is already in use"):
        MetricsServer(loop.server.port, bytes, selectors.DefaultSelector(), host="127.0.0.1")


def test_close_unregisters_and_closes_everything(loop):
    port = loop.server.port
    assert port > 0
    pending = socket.create_connection(("127.0.0.1", port), timeout=10)
    loop.until(lambda: loop.server.connections == 1)
    loop.server.close()
    loop.server.close()
    assert [key.data for key in loop.sel.get_map().values()] == ["wake"]
    assert pending.recv(1) == b""
    pending.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
