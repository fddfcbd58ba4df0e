"""The wire protocol: framing, the size cap, incremental reads, non-blocking writes."""

from __future__ import annotations

import os

import orjson
import pytest

from shared import wire
from shared.usage import Usage


def test_round_trip_one_frame_at_a_time():
    reader = wire.FrameReader()
    frames = reader.feed(wire.encode(wire.READY, {"pid": 12, "worker": 3}))
    assert [(f.type, f.json()) for f in frames] == [(wire.READY, {"pid": 12, "worker": 3})]
    assert reader.pending == 0


def test_empty_body_decodes_to_empty_dict():
    (frame,) = wire.FrameReader().feed(wire.encode(wire.STOP))
    assert frame.type == wire.STOP and frame.body == b"" and frame.json() == {}


def test_byte_by_byte_and_many_per_read():
    data = b"".join(wire.encode(wire.HEARTBEAT, {"job": i}) for i in range(5))
    reader = wire.FrameReader()
    got = []
    for i in range(len(data)):
        got += reader.feed(data[i:i + 1])
    assert [f.json()["job"] for f in got] == [0, 1, 2, 3, 4]
    assert [f.json()["job"] for f in wire.FrameReader().feed(data)] == [0, 1, 2, 3, 4]


def one(message) -> wire.Frame:
    (frame,) = wire.FrameReader().feed(message.encode())
    assert frame.type == message.TYPE
    return frame


def test_run_embeds_args_text_without_decoding_it():
    args_json = '{"path": "a.png", "width": 64}'
    data = wire.Run.pack(7, "resize", "images", 2, 5, args_json)
    (frame,) = wire.FrameReader().feed(data)
    assert args_json in frame.body.decode()
    assert frame.json() == {"id": 7, "kind": "resize", "queue": "images", "attempt": 2,
                            "max_attempts": 5, "args": {"path": "a.png", "width": 64}}
    run = wire.Run.decode(frame)
    assert (run.id, run.kind, run.queue, run.attempt, run.max_attempts) == (
        7, "resize", "images", 2, 5)
    assert run.args == {"path": "a.png", "width": 64} and run.args_error is None


def test_run_round_trip_from_the_object():
    sent = wire.Run(3, "k", "q", 1, 2, args={"a": [1, 2]})
    got = wire.Run.decode(one(sent))
    assert got == wire.Run(3, "k", "q", 1, 2, None, {"a": [1, 2]}, None)


@pytest.mark.parametrize(("args_json", "problem"), [
    ('{"n": 1e400}', "infinity"),
    ("[" * 2000 + "]" * 2000, "depth"),
    ('{"kind": "x", "args": 1e999}', "infinity"),
])
def test_run_with_args_orjson_cannot_parse_still_names_its_job(args_json, problem):
    frame = one(wire.Run(41, "pool_echo", "default", 1, 3, args_json))
    run = wire.Run.decode(frame)
    assert (run.id, run.kind, run.attempt, run.args) == (41, "pool_echo", 1, None)
    assert problem in run.args_error


def test_a_run_body_that_is_not_json_at_all_is_a_protocol_error():
    (frame,) = wire.FrameReader().feed(wire.encode_raw(wire.RUN, b"{nope"))
    with pytest.raises(wire.ProtocolError):
        wire.Run.decode(frame)


def test_done_carries_its_job_id_the_raw_result_and_last_flag():
    frame = one(wire.Done(9, b'{"ok":true}', last=True))
    assert frame.body.endswith(b'{"ok":true}') and frame.last
    assert wire.Done.unpack(frame) == (9, '{"ok":true}', None, None)
    assert wire.Done.decode(frame) == wire.Done(9, b'{"ok":true}', True)
    assert not one(wire.Done(9, b"null")).last
    # Nothing to say about usage or output: the frame is as it was, 8 bytes and the result.
    assert len(frame.body) == 8 + len(b'{"ok":true}')


def test_done_carries_usage_and_output_between_the_id_and_the_result():
    usage = Usage(0.25, 0.5, 300 << 20)
    frame = one(wire.Done(9, b'[1,"x"]', usage=usage, output="é\x00line\n"))
    assert frame.body.endswith(b'[1,"x"]')
    assert wire.Done.unpack(frame) == (9, '[1,"x"]', usage, "é\x00line\n")
    assert wire.Done.decode(frame) == wire.Done(9, b'[1,"x"]', False, usage, "é\x00line\n")
    # Usage without output costs 24 bytes; an empty output is not sent at all.
    bare = one(wire.Done(9, b"null", usage=usage, output=""))
    assert len(bare.body) == 8 + 24 + len(b"null") and wire.Done.unpack(bare).output is None


def test_a_done_whose_output_runs_past_its_body_is_a_protocol_error():
    frame = one(wire.Done(9, b"null", output="abc"))
    cut = wire.encode_raw(wire.DONE, frame.body[:12], frame.flags)
    (bad,) = wire.FrameReader().feed(cut)
    with pytest.raises(wire.ProtocolError):
        wire.Done.unpack(bad)


def test_a_done_without_a_job_id_is_a_protocol_error():
    (frame,) = wire.FrameReader().feed(wire.encode_raw(wire.DONE, b"1"))
    with pytest.raises(wire.ProtocolError):
        wire.Done.decode(frame)


@pytest.mark.parametrize("message", [
    wire.Ready(123, 4),
    wire.Heartbeat(5),
    wire.Heartbeat(5, {"done": 1, "total": 3, "message": "é"}),
    wire.Failed(6, "retry", "later", "tb", 7.5),
    wire.Failed(6, "error", "boom", last=True),
    wire.Failed(6, "error", "boom", "tb", None, False, Usage(1.5, 2.0, 1 << 30), "out\n"),
    wire.Stop(),
    wire.BootError("import", "ModuleNotFoundError: No module named 'x'"),
])
def test_each_message_round_trips(message):
    assert wire.decode(one(message)) == message


@pytest.mark.parametrize(("mtype", "body"), [
    (wire.READY, b"[1]"),
    (wire.READY, b"{}"),
    (wire.HEARTBEAT, b'{"progress": 1}'),
    (wire.FAILED, b'{"job": 1}'),
    (wire.FAILED, b"not json"),
    (wire.FAILED, b'{"job": 1, "kind": "error", "usage": [1]}'),
    (wire.FAILED, b'{"job": 1, "kind": "error", "output": 5}'),
])
def test_bodies_that_do_not_fit_their_type_are_protocol_errors(mtype, body):
    (frame,) = wire.FrameReader().feed(wire.encode_raw(mtype, body))
    with pytest.raises(wire.ProtocolError):
        wire.decode(frame)


def test_progress_that_json_cannot_hold_fails_to_encode():
    from decimal import Decimal

    with pytest.raises(TypeError):
        wire.Heartbeat(1, {"done": Decimal("1.5")}).encode()


def test_size_cap_is_checked_before_the_body_arrives():
    reader = wire.FrameReader(max_body=100)
    header = wire.HEADER.pack(wire.VERSION, wire.DONE, 0, 10_000)
    with pytest.raises(wire.ProtocolError, match="over the 100-byte cap"):
        reader.feed(header)  # no body bytes sent at all


@pytest.mark.parametrize("header", [
    wire.HEADER.pack(9, wire.DONE, 0, 0),
    wire.HEADER.pack(wire.VERSION, 200, 0, 0),
])
def test_bad_version_or_type_is_a_protocol_error(header):
    with pytest.raises(wire.ProtocolError):
        wire.FrameReader().feed(header)


def test_writer_never_blocks_and_flushes_later():
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        writer = wire.FrameWriter()
        big = wire.encode_raw(wire.DONE, b"x" * (1 << 20))  # larger than a pipe holds
        assert writer.send(big, lambda d: os.write(w, d)) is False
        assert writer.wants_write
        got = b""
        while writer.wants_write or len(got) < len(big):
            if writer.wants_write:
                writer.flush(lambda d: os.write(w, d))
            got += os.read(r, 1 << 16)
        assert got == big
        assert writer.pending == 0
    finally:
        os.close(r)
        os.close(w)


def test_writer_keeps_order_while_backlogged():
    taken = []
    budget = [3]

    def write(data):
        if budget[0] <= 0:
            raise BlockingIOError
        n = min(len(data), budget[0])
        budget[0] -= n
        taken.append(bytes(data[:n]))
        return n

    writer = wire.FrameWriter()
    assert not writer.send(b"abcdef", write)
    assert not writer.send(b"gh", write)
    budget[0] = 100
    assert writer.flush(write)
    assert b"".join(taken) == b"abcdefgh"


def test_blocking_reader_and_write_all():
    r, w = os.pipe()
    try:
        wire.write_all(w, wire.encode(wire.RUN, {"n": 1}) + wire.Stop().encode())
        os.close(w)
        reader = wire.BlockingReader(r)
        assert reader.next().json() == {"n": 1}
        assert reader.next().type == wire.STOP
        assert reader.next() is None
    finally:
        os.close(r)


def test_bodies_are_orjson():
    body = {"kind": "error", "message": "é", "retry_delay": None}
    (frame,) = wire.FrameReader().feed(wire.encode(wire.FAILED, body))
    assert frame.body == orjson.dumps(body)
