"""The dashboard's pure logic, without a server or a database: the token check, the
job list's filters, the page filters and the JSON that must not fail on odd jsonb."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from supervisor.admin import AdminError
from supervisor.dashboard import auth, queries, render, search
from supervisor.dashboard.app import is_loopback


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None),
    ("Bearer ", None), ("", None), (None, None), ("abc", None),
])
def test_bearer_reads_only_a_bearer_header(header, token):
    assert auth.bearer(header) == token


def test_token_from_env_treats_blank_as_unset():
    assert auth.token_from_env({}) is None
    assert auth.token_from_env({auth.TOKEN_ENV: "  "}) is None
    assert auth.token_from_env({auth.TOKEN_ENV: " s3cret "}) == "s3cret"


@pytest.mark.parametrize(("expected", "offered", "reason"), [
    (None, "anything", "read-only"),
    (None, None, "read-only"),
    ("s3cret", None, "needs the dashboard token"),
    ("s3cret", "", "needs the dashboard token"),
    ("s3cret", "s3cre", "wrong dashboard token"),
    ("s3cret", "s3cret ", "wrong dashboard token"),
    ("s3cret", "ßecret", "wrong dashboard token"),  # non-ASCII compares as bytes
])
def test_check_refuses_with_one_line(expected, offered, reason):
    with pytest.raises(auth.Refused, match=reason):
        auth.check(expected, offered)


def test_check_accepts_the_token():
    auth.check("s3cret", "s3cret")


def test_parse_filters_drops_empty_values_and_defaults_the_page():
    assert queries.parse_filters({"queue": "", "kind": " ", "state": "", "q": ""}) == {
        "queue": None, "kind": None, "state": None, "q": None, "before": None,
        "after": None, "created_after": None, "created_before": None, "sort": "newest",
        "limit": search.DEFAULT_PAGE}
    got = queries.parse_filters({"queue": "images", "kind": "resize", "state": "running",
                                 "q": " big ", "before": "40", "limit": "10"})
    assert got == {"queue": "images", "kind": "resize", "state": "running", "q": "big",
                   "before": 40, "after": None, "created_after": None,
                   "created_before": None, "sort": "newest", "limit": 10}
    got = queries.parse_filters({"created_after": "2026-12-01", "sort": "oldest",
                                 "created_before": "2026-12-02T03:04:05+01:00"})
    assert got["created_after"] == datetime(2026, 12, 1, tzinfo=UTC)
    assert got["created_before"] == datetime(2026, 12, 2, 2, 4, 5, tzinfo=UTC)
    assert got["sort"] == "oldest"


@pytest.mark.parametrize("params", [
    {"state": "done"}, {"limit": "0"}, {"limit": "501"}, {"limit": "1e3"}, {"before": "x"},
    {"before": "0"}, {"queue": "q" * 256}, {"q": "x" * 201},
    # NUL bytes anywhere, dates that are not dates or out of range, unknown sorts,
    # args JSON that is not an object, a range that ends before it starts.
    {"q": "a\x00b"}, {"kind": "\x00"}, {"queue": "x\x00"}, {"x\x00": "1"},
    {"created_after": "2026-13-01"}, {"created_before": "99999-01-01"},
    {"created_after": "yesterday"}, {"sort": "random"}, {"q": "{not json"},
    {"q": '{"a": 1'}, {"created_after": "2026-12-02", "created_before": "2026-12-01"},
])
def test_parse_filters_refuses_malformed_input_as_usage(params):
    with pytest.raises(AdminError) as caught:
        queries.parse_filters(params)
    assert caught.value.usage and "\n" not in str(caught.value)


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (0, "0.0s"), (9.94, "9.9s"), (42, "42s"), (61, "1m 01s"), (3600, "1h 00m"),
    (49 * 3600, "2d 1h"), (-5, "0.0s"),
])
def test_age(seconds, text):
    assert render._age(seconds) == text


def test_since_says_ago_or_in():
    now = datetime.now(UTC)
    assert render._since(now - timedelta(minutes=2)).endswith(" ago")
    assert render._since(now + timedelta(hours=1)).startswith("in ")
    assert render._since(None) == "-"


@pytest.mark.parametrize(("value", "text"), [
    ("2026-11-30T13:41:28.150388+00:00", "2026-11-30 13:41:28 UTC"),
    (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02 03:04:05 UTC"),
    ("yesterday-ish", "yesterday-ish"), (None, ""), (17, "17"),
])
def test_stamp_shows_error_times_like_columns_and_odd_ones_as_they_are(value, text):
    assert render._stamp(value) == text


@pytest.mark.parametrize(("progress", "percent"), [
    ({"done": 3, "total": 4}, 75.0), ({"done": 9, "total": 4}, 100.0), ({"done": 3}, None),
    ({"done": 3, "total": 0}, None), ({"done": "3", "total": 4}, None), ("half", None),
    (None, None),
])
def test_percent(progress, percent):
    assert render._percent(progress) == percent


def test_dumps_takes_what_orjson_refuses():
    value = {"n": 2**70, "at": datetime(2026, 1, 1, tzinfo=UTC), "inf": float("inf")}
    text = render.dumps(value).decode()
    # the same compact form orjson writes, so a page does not change shape for one value
    assert '"n":1180591620717411303424' in text
    assert '"at":"2026-01-01T00:00:00+00:00"' in text and '"inf":null' in text
    assert orjson.loads(render.dumps({"ok": [1, 2]})) == {"ok": [1, 2]}


def test_templates_escape_every_value():
    html = render.ENV.from_string("<p>{{ v }}</p>").render(v="<script>x</script>")
    assert html == "<p>&lt;script&gt;x&lt;/script&gt;</p>"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("10.0.0.5", False), ("example.com", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_the_navigation_is_one_list_to_extend():
    assert [path for _label, path in render.NAV] == [
        "/", "/jobs", "/kinds", "/schedules", "/batches", "/limits", "/supervisors"]
