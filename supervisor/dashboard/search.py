"""The job search behind ``/jobs`` and ``/api/jobs``: the filters read from a query
string, and the SQL that answers them through migration 0013's indexes, so a page
costs milliseconds on a table of millions.

What ``q`` means depends on its shape:
- a number is a job id, looked up by the primary key;
- a JSON object (``{"user": 42}``) matches jobs whose args contain it (``@>``, GIN);
- any other text matches kinds that contain it (the few distinct kinds are read by
  skipping through the kind index, then each one's jobs newest first) and error
  messages that contain its words, each word as a prefix (a GIN full-text index).

Every query parameter passes ``check_params`` first: the one place that refuses what no
filter can mean (a NUL byte, text too long), so a bad request is a 400 with one line.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg import sql

from supervisor import admin
from supervisor.admin import AdminError, check_queue_name

MAX_PAGE = 500
DEFAULT_PAGE = 50
MAX_SEARCH = 200  # characters of ?q=; longer text is a mistake, not a search
MAX_PARAM = 1000  # characters of any other parameter
SORTS = ("newest", "oldest")
_MAX_WORDS = 8
_LEXEME = re.compile(r"'((?:[^']|'')*)':([\d,]+)")

_COLUMNS = sql.SQL("""id, kind, queue, state, attempt, max_attempts, priority, run_at,
    created_at, attempted_at, finished_at, progress,
    errors -> -1 ->> 'message' AS last_error""")

# The distinct kinds, one index probe each (a loose index scan): dozens of kinds cost
# dozens of probes whatever the size of the table.
_KINDS = """
WITH RECURSIVE k(kind) AS (
    (SELECT kind FROM supervisor.jobs ORDER BY kind LIMIT 1)
    UNION ALL
    SELECT (SELECT kind FROM supervisor.jobs WHERE kind > k.kind ORDER BY kind LIMIT 1)
    FROM k WHERE k.kind IS NOT NULL
)
SELECT kind FROM k WHERE kind IS NOT NULL LIMIT 10000
"""

# Must match the expression of supervisor.jobs_error_words_idx exactly.
_ERROR_WORDS = sql.SQL("errors <> '[]'::jsonb AND to_tsvector('simple', "
                       "jsonb_path_query_array(errors, '$[*].message')) @@ {}::tsquery")


def check_params(params: dict[str, str]) -> None:
    """Refuse query parameters no filter can mean: a NUL byte (PostgreSQL text cannot
    hold one) or a value over ``MAX_PARAM`` characters. ``AdminError`` (usage)."""
    for name, value in params.items():
        if "\x00" in name or "\x00" in value:
            raise AdminError(f"parameter {name.replace(chr(0), '')!r} contains a NUL byte",
                             usage=True)
        if len(value) > MAX_PARAM:
            raise AdminError(f"parameter {name!r} has at most {MAX_PARAM} characters; "
                             f"got {len(value)}", usage=True)


def parse_filters(params: dict[str, str]) -> dict[str, Any]:
    """The job list's filters from query parameters (``queue``, ``kind``, ``state``,
    ``q``, ``created_after``, ``created_before``, ``sort``, ``before``/``after``,
    ``limit``), empty ones dropped; ``AdminError`` (usage) naming the first that is
    malformed."""
    check_params(params)

    def text(name: str) -> str | None:
        value = (params.get(name) or "").strip()
        return value or None

    state = admin.check_state(text("state"))
    queue = text("queue")
    if queue is not None:
        check_queue_name(queue)
    search = text("q")
    if search is not None and len(search) > MAX_SEARCH:
        raise AdminError(f"q has at most {MAX_SEARCH} characters; got {len(search)}",
                         usage=True)
    search_terms(search)  # refuses malformed JSON here, before any query
    sort = text("sort") or "newest"
    if sort not in SORTS:
        raise AdminError(f"sort is one of {', '.join(SORTS)}; got {sort!r}", usage=True)
    after, before = _moment("created_after", text("created_after")), \
        _moment("created_before", text("created_before"))
    if after is not None and before is not None and after > before:
        raise AdminError("created_after is later than created_before", usage=True)
    limit = text("limit")
    return {
        "queue": queue,
        "kind": text("kind"),
        "state": state,
        "q": search,
        "created_after": after,
        "created_before": before,
        "sort": sort,
        "before": _cursor("before", text("before")),
        "after": _cursor("after", text("after")),
        "limit": _limit(limit) if limit is not None else DEFAULT_PAGE,
    }


def _cursor(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return admin.parse_job_id(value)
    except AdminError as exc:
        raise AdminError(f"{name}: {exc}", usage=True) from None


def _moment(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    text = value.removesuffix(" UTC")  # as the pages show times
    try:
        moment = datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        raise AdminError(f"{name} is a date or time in ISO 8601 (2026-12-01 or "
                         f"2026-12-01T02:00:00Z); got {value!r}", usage=True) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise AdminError(f"limit is an integer from 1 to {MAX_PAGE}; got {text!r}",
                         usage=True)
    return int(text)


def search_terms(search: str | None) -> dict[str, Any]:
    """What ``q`` asks for: ``{"id": n}``, ``{"args": {...}}``, ``{"text": s}`` or
    ``{}`` (no search). ``AdminError`` (usage) for JSON that is not an object."""
    if search is None:
        return {}
    if search.isdigit():
        if len(search) > 19 or int(search) > admin.jobs.BIGINT_MAX or int(search) == 0:
            return {"none": True}  # no job has such an id
        return {"id": int(search)}
    if search.startswith("{"):
        try:
            value = orjson.loads(search)
        except orjson.JSONDecodeError:
            raise AdminError("q starting with { is a JSON object to match args against, "
                             f"and this is not valid JSON: {search[:60]!r}",
                             usage=True) from None
        if not isinstance(value, dict):
            raise AdminError("q as JSON must be an object", usage=True)
        return {"args": value}
    return {"text": search}


def _tsquery(conn: psycopg.Connection, search: str) -> str | None:
    # The words as the index's own parser splits them ("missing.png" stays one word),
    # all of them required, the last one as a prefix (what is being typed); quoted, so
    # nothing in them is tsquery syntax. Only the last is a prefix because a prefix
    # makes PostgreSQL recheck every matching row, which doubles the cost.
    row = conn.execute("SELECT to_tsvector('simple', %s)::text", (search,)).fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    (vector,) = row
    words = _words_in_order(vector)[:_MAX_WORDS]
    quoted = ["'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words]
    if quoted:
        quoted[-1] += ":*"
    return " & ".join(quoted) or None


def _words_in_order(vector: str) -> list[str]:
    # A tsvector's text is "'word':3 'other':1,4": the lexemes sorted, each with its
    # positions; put them back in the order they were typed.
    found = []
    for match in _LEXEME.finditer(vector):
        word = match.group(1).replace("''", "'").replace("\\\\", "\\")
        found.append((min(int(p) for p in match.group(2).split(",")), word))
    return [word for _pos, word in sorted(found)]


def matching_kinds(conn: psycopg.Connection, needle: str) -> list[str]:
    """The distinct kinds that contain ``needle`` (case-insensitive)."""
    low = needle.lower()
    return [kind for (kind,) in conn.execute(_KINDS) if low in kind.lower()]


def jobs(conn: psycopg.Connection, filters: dict[str, Any]) -> dict[str, Any]:
    """One page of jobs matching ``filters`` (see ``parse_filters``) in their sort order:
    ``{jobs, next_before, next_after}``; the one of ``next_before`` (newest first) or
    ``next_after`` (oldest first) that is not None is the cursor of the next page."""
    newest = filters["sort"] == "newest"
    terms = search_terms(filters["q"])
    limit = filters["limit"] + 1
    where = _where(filters)
    order = sql.SQL("id DESC" if newest else "id")
    if terms.get("none"):
        rows: list[dict[str, Any]] = []
    elif "text" in terms:
        rows = _text_search(conn, filters, terms["text"], where, order, limit)
    else:
        if "id" in terms:
            where.append(sql.SQL("id = {}").format(terms["id"]))
        if "args" in terms:
            where.append(sql.SQL("args @> {}::jsonb").format(
                orjson.dumps(terms["args"]).decode()))
        rows = _select(conn, sql.SQL("SELECT {} FROM supervisor.jobs WHERE {} "
                                     "ORDER BY {} LIMIT {}").format(
            _COLUMNS, _and(where), order, limit))
    more = len(rows) > filters["limit"]
    rows = rows[:filters["limit"]]
    cursor = rows[-1]["id"] if more else None
    return {"jobs": rows, "next_before": cursor if newest else None,
            "next_after": None if newest else cursor}


def _text_search(conn: psycopg.Connection, filters: dict[str, Any], text: str,
                 where: list[sql.Composable], order: sql.Composable,
                 limit: int) -> list[dict[str, Any]]:
    # Two indexed lookups merged: the newest jobs of each matching kind (each read in
    # id order from jobs_kind_idx where the operator created it, docs/dashboard.md) and
    # the jobs whose error messages have the words.
    parts: list[sql.Composable] = []
    kinds = matching_kinds(conn, text)
    if filters["kind"] is not None:
        kinds = [k for k in kinds if k == filters["kind"]]
    if kinds:
        parts.append(sql.SQL(
            "SELECT m.* FROM unnest({}::text[]) AS k(kind) CROSS JOIN LATERAL "
            "(SELECT {} FROM supervisor.jobs j WHERE j.kind = k.kind AND {} "
            "ORDER BY {} LIMIT {}) AS m").format(kinds, _COLUMNS, _and(where), order, limit))
    query = _tsquery(conn, text)
    if query is not None:
        parts.append(sql.SQL("SELECT {} FROM supervisor.jobs WHERE {} AND {} "
                             "ORDER BY {} LIMIT {}").format(
            _COLUMNS, _ERROR_WORDS.format(query), _and(where), order, limit))
    if not parts:
        return []
    union = sql.SQL(" UNION ").join(sql.SQL("({})").format(p) for p in parts)
    return _select(conn, sql.SQL("SELECT * FROM ({}) AS found ORDER BY {} LIMIT {}").format(
        union, order, limit))


def _where(filters: dict[str, Any]) -> list[sql.Composable]:
    where: list[sql.Composable] = []
    for column in ("queue", "kind", "state"):
        if filters[column] is not None:
            where.append(sql.SQL("{} = {}").format(sql.Identifier(column), filters[column]))
    if filters["created_after"] is not None:
        where.append(sql.SQL("created_at >= {}").format(filters["created_after"]))
    if filters["created_before"] is not None:
        where.append(sql.SQL("created_at < {}").format(filters["created_before"]))
    if filters["sort"] == "newest" and filters["before"] is not None:
        where.append(sql.SQL("id < {}").format(filters["before"]))
    if filters["sort"] == "oldest" and filters["after"] is not None:
        where.append(sql.SQL("id > {}").format(filters["after"]))
    return where


def _and(where: list[sql.Composable]) -> sql.Composable:
    return sql.SQL(" AND ").join(where) if where else sql.SQL("true")


def _select(conn: psycopg.Connection, query: sql.SQL | sql.Composed) -> list[dict[str, Any]]:
    cur = conn.execute(query)
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]
