"""enqueue_many holds its jobs' JSON, not an allocation per job (issue 24, item 8):
orjson's bytes objects keep 4 KB each however short the document, and a list of them
held 4.2 KB per job (4.2 GB for a million jobs)."""

import tracemalloc

import orjson
import pytest

from shared.enqueue import enqueue_many
from shared.producers.argsbuffer import ArgsBuffer

pytestmark = pytest.mark.timeout(60)


def test_enqueue_many_allocates_about_its_encoded_args(conn, dsn):
    jobs = 20_000
    args_list = [{"n": i, "name": f"job-{i}"} for i in range(jobs)]
    encoded = sum(len(orjson.dumps(a)) for a in args_list)
    enqueue_many("bt_step", args_list[:10], dsn=dsn)  # the pool's connection, opened
    tracemalloc.start()
    try:
        ids = enqueue_many("bt_step", args_list, dsn=dsn)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ids) == jobs
    # The JSON and its offsets, plus the ids returned (an int object each) and slack:
    # well under 200 bytes a job; a buffer per job kept 4 KB each.
    assert peak < 2 * encoded + 100 * jobs, (peak, encoded)
    stored = conn.execute("SELECT args FROM supervisor.jobs WHERE id = ANY(%s) ORDER BY id",
                          (ids[:3] + ids[-3:],)).fetchall()
    assert [r[0] for r in stored] == args_list[:3] + args_list[-3:]


def test_the_buffer_gives_back_each_job_as_it_was_encoded():
    packed = ArgsBuffer()
    docs = [b"{}", b'{"a":"\\\\x"}', b'{"n":1}']
    for doc in docs:
        packed.append(doc)
    assert len(packed) == 3 and packed.size == sum(map(len, docs))
    assert [packed[i] for i in range(3)] == docs
    assert [bytes(d) for d in packed.span(1, 3)] == docs[1:]
