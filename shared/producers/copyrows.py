"""The rows of ``enqueue_many``'s COPY, written as COPY text by hand: psycopg's per-row
``write_row`` cost more than the server's whole insert. orjson output holds no raw
control characters, so a backslash is the only byte COPY text needs escaped in args."""

from __future__ import annotations

from collections.abc import Iterator

from shared.producers.argsbuffer import ArgsBuffer

COPY_CHUNK = 2000  # rows per write: the server parses one chunk while we build the next


def copy_job_rows(ids: list[int], encoded: ArgsBuffer, common: dict, state: str,
                  due: str | None) -> tuple[str, Iterator[bytes]]:
    """The COPY statement and its buffer, ``COPY_CHUNK`` rows per piece. ``common``
    holds what every row shares (kind, queue, priority, max_attempts, timeout, and when
    set batch_id, trace_context, depends_on and dependency_names), plus
    ``concurrency_keys``: one key (or None) per row, or None when no row has one.
    ``due``: the rows' run_at, or None for now()."""
    columns = "id, kind, queue, args, priority, max_attempts, timeout"
    timeout = common["timeout"]
    attempts = common["max_attempts"]
    tail = b"\t%d\t%s\t%s" % (common["priority"],
                               b"\\N" if attempts is None else b"%d" % attempts,
                               b"\\N" if timeout is None else repr(float(timeout)).encode())
    if due is not None:  # else state and run_at take their defaults: available, now()
        columns += ", state, run_at"
        tail += b"\t%s\t%s" % (copy_text(state), copy_text(due))
    if common.get("batch_id") is not None:  # a member of a batch (shared.batches)
        columns += ", batch_id"
        tail += b"\t%d" % common["batch_id"]
    if common.get("expires_at") is not None:  # not started by then: expired (issue 28)
        columns += ", expires_at"
        tail += b"\t%s" % copy_text(common["expires_at"])
    for reserved in ("cpus", "memory"):  # a declared reservation (shared.reservations)
        if common.get(reserved) is not None:
            columns += f", {reserved}"
            tail += b"\t%d" % common[reserved]
    if common.get("resources") is not None:  # counted resources, as JSON text (0027)
        columns += ", resources"
        tail += b"\t%s" % copy_text(common["resources"])
    if common.get("depends_on") is not None:  # held for dependencies (shared.dependencies)
        columns += ", depends_on"
        tail += b"\t{%s}" % b",".join(b"%d" % i for i in common["depends_on"])
    if common.get("dependency_names") is not None:  # their names, JSON text
        columns += ", dependency_names"
        tail += b"\t%s" % copy_text(common["dependency_names"])
    if common.get("trace_context") is not None:  # enqueued under a span (shared.tracing)
        columns += ", trace_context"
        tail += b"\t%s" % copy_text(common["trace_context"])
    keys = common.get("concurrency_keys")
    if keys is not None:  # the last column, one value per row
        columns += ", concurrency_key"
        ends = [b"\t\\N\n" if key is None else b"\t%s\n" % copy_text(key) for key in keys]
    else:
        ends = None
    middle = b"\t%s\t%s\t" % (copy_text(common["kind"]), copy_text(common["queue"]))
    return f"COPY supervisor.jobs ({columns}) FROM STDIN", _chunks(ids, encoded, middle,
                                                                   tail, ends)


def _chunks(ids: list[int], encoded: ArgsBuffer, middle: bytes, tail: bytes,
            ends: list[bytes] | None) -> Iterator[bytes]:
    for start in range(0, len(ids), COPY_CHUNK):
        stop = start + COPY_CHUNK
        if ends is None:  # the common case, kept to one format per row
            last = tail + b"\n"
            yield b"".join([
                b"%d%s%s%s" % (job_id, middle, args.replace(b"\\", b"\\\\"), last)
                for job_id, args in zip(ids[start:stop], encoded.span(start, stop), strict=True)
            ])
        else:
            yield b"".join([
                b"%d%s%s%s%s" % (job_id, middle, args.replace(b"\\", b"\\\\"), tail, end)
                for job_id, args, end in zip(ids[start:stop], encoded.span(start, stop),
                                             ends[start:stop], strict=True)
            ])


def copy_text(value: str) -> bytes:
    """One field in COPY text format."""
    escaped = (value.replace("\\", "\\\\").replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return escaped.encode()
