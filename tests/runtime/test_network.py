"""Tests of `epochal.runtime.wire.network`: framing, links, and credit-based flow control.

A `Link` sets TCP_NODELAY, which a Unix `socket.socketpair()` refuses, so links here run over a
connected loopback TCP pair (what `socketpair` itself builds on platforms without Unix sockets);
the blocking helpers take plain sockets and run over `socket.socketpair()`.
"""

from __future__ import annotations

import pickle
import select
import socket
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from epochal.runtime.wire.elements import END_OF_INPUT, Barrier, Element, LoopProbe, Watermark
from epochal.runtime.wire.network import (
    CONTROL,
    CREDIT,
    DATA_ARROW,
    DATA_PICKLE,
    EVENT,
    HELLO,
    Link,
    LinkClosed,
    RemoteInputChannel,
    RemoteOutputChannel,
    decode_arrow,
    encode_arrow,
    encode_frame,
    parse_credit,
    read_object_blocking,
    write_object_blocking,
)

Frame = tuple[int, int, int, bytes]
KINDS = [DATA_PICKLE, DATA_ARROW, EVENT, CREDIT, CONTROL, HELLO]
_DEADLINE = 10.0  # seconds any wait below may take before the test fails


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


@pytest.fixture
def links() -> Iterator[tuple[Link, Link]]:
    """Two links, one at each end of a connection."""
    a, b = _tcp_pair()
    left, right = Link(a, "left"), Link(b, "right")
    yield left, right
    left.close()
    right.close()


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = _DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        select.select([], [], [], 0.001)


def _pump(sender: Link, receiver: Link, count: int) -> list[Frame]:
    """Flush `sender` and read `receiver` until `count` frames arrived."""
    frames: list[Frame] = []

    def arrived() -> bool:
        sender.flush()
        frames.extend(receiver.receive())
        return len(frames) >= count

    _wait_until(arrived, f"{count} frames arrived")
    assert len(frames) == count
    return frames


def _readable(link: Link) -> bool:
    return bool(select.select([link.sock], [], [], 0)[0])


# -- frames ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_frame_of_every_kind_round_trips(links: tuple[Link, Link], kind: int) -> None:
    left, right = links
    sent = [(kind, 0, 0, b""), (kind, 7, 3, b"payload"), (kind, 2**32 - 1, 2**32 - 1, bytes(range(256)) * 3)]
    for frame in sent:
        left.send_frame(*frame)
    assert _pump(left, right, len(sent)) == sent


def test_frames_travel_both_ways_on_one_link(links: tuple[Link, Link]) -> None:
    left, right = links
    left.send_frame(DATA_PICKLE, 1, 4, b"to the right")
    right.send_frame(CREDIT, 1, 4, b"to the left")
    assert _pump(left, right, 1) == [(DATA_PICKLE, 1, 4, b"to the right")]
    assert _pump(right, left, 1) == [(CREDIT, 1, 4, b"to the left")]


def test_encode_frame_is_what_a_link_sends(links: tuple[Link, Link]) -> None:
    left, right = links
    left.sock.sendall(encode_frame(EVENT, 5, 9, b"raw") + encode_frame(HELLO, 6, 0, b""))
    assert _pump(left, right, 2) == [(EVENT, 5, 9, b"raw"), (HELLO, 6, 0, b"")]


def test_send_object_is_a_pickled_control_frame(links: tuple[Link, Link]) -> None:
    left, right = links
    left.send_object({"start": 3}, 3)  # the attempt, by position
    ((kind, attempt, channel, payload),) = _pump(left, right, 1)
    assert (kind, attempt, channel) == (CONTROL, 3, 0)
    assert pickle.loads(payload) == {"start": 3}


def test_arrow_batches_encode_and_decode_unchanged() -> None:
    batch = pa.RecordBatch.from_pydict({"word": ["a", None, "ünï"], "n": [1, 2, 3]})
    decoded = decode_arrow(encode_arrow(batch))
    assert isinstance(decoded, pa.RecordBatch)
    assert decoded.equals(batch) and decoded.schema.equals(batch.schema)


# -- partial reads and writes ----------------------------------------------------------------------
def test_a_frame_split_across_reads_is_reassembled(links: tuple[Link, Link]) -> None:
    left, right = links
    first, second = encode_frame(DATA_PICKLE, 2, 1, b"abcdefghij"), encode_frame(EVENT, 2, 1, b"xy")
    wire = first + second
    # byte by byte into the header, then to the middle of the first payload, into the second frame
    cuts = [1, 2, 3, 10, 16, 17, 20, len(first) + 5, len(wire)]
    frames: list[Frame] = []
    start = 0
    for cut in cuts:
        left.sock.sendall(wire[start:cut])
        start = cut
        _wait_until(lambda: _readable(right), "the bytes arrived")
        frames.extend(right.receive())
        assert len(frames) == (cut >= len(first)) + (cut == len(wire)), f"after {cut} bytes"
    assert frames == [(DATA_PICKLE, 2, 1, b"abcdefghij"), (EVENT, 2, 1, b"xy")]


def test_a_write_larger_than_the_socket_takes_completes_over_several_flushes(links: tuple[Link, Link]) -> None:
    left, right = links
    big = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than a socket buffer holds
    left.send_frame(DATA_ARROW, 1, 2, big)
    left.send_frame(EVENT, 1, 2, b"after")
    left.flush()
    assert left.wants_write, "the socket took all of it: no partial write happened"
    frames = _pump(left, right, 2)
    assert frames[0] == (DATA_ARROW, 1, 2, big)
    assert frames[1] == (EVENT, 1, 2, b"after")
    assert not left.wants_write


# -- channels and credits --------------------------------------------------------------------------
def _deliver(frames: list[Frame], into: RemoteInputChannel) -> None:
    for kind, _, _, payload in frames:
        into.deliver(kind, payload)


def _drain(channel: RemoteInputChannel) -> list[Element]:
    out: list[Element] = []
    while (element := channel.poll()) is not None:
        out.append(element)
    return out


def test_records_events_and_arrow_batches_cross_a_channel_in_order(links: tuple[Link, Link]) -> None:
    left, right = links
    out = RemoteOutputChannel(left, 4, 3, capacity=100, batch_size=1000, flush_interval=60.0)
    inp = RemoteInputChannel(right, 4, 3, capacity=100)
    arrow = pa.RecordBatch.from_pydict({"k": ["a", "b"], "v": [1, 2]})
    elements: list[Element] = [
        [1, 2], Barrier(7, 1.5, completed=6), arrow, Watermark(3.0), LoopProbe(2, False), ["x"], END_OF_INPUT,
    ]
    for element in elements:
        out.send(element)
    out.flush()
    frames = _pump(left, right, len(elements))
    assert [kind for kind, *_ in frames] == [DATA_PICKLE, EVENT, DATA_ARROW, EVENT, EVENT, DATA_PICKLE, EVENT]
    assert {(attempt, channel) for _, attempt, channel, _ in frames} == {(3, 4)}
    _deliver(frames, inp)
    received = _drain(inp)
    assert received == elements
    assert isinstance(received[2], pa.RecordBatch)


def test_buffered_batches_of_one_shape_leave_as_one_frame() -> None:
    a, b = _tcp_pair()
    link = Link(a)
    try:
        out = RemoteOutputChannel(link, 0, 1, capacity=10, batch_size=5, flush_interval=60.0)
        out.send([1, 2])
        out.send([3, 4])
        assert not link.wants_write  # 4 rows buffered, below the batch size
        out.send([5])  # 5 rows: the batch leaves
        assert link.wants_write and out.credits == 9
        schema_a = pa.RecordBatch.from_pydict({"v": [1]})
        out.send(schema_a)  # another shape: a frame of its own
        out.send(pa.RecordBatch.from_pydict({"w": ["x"]}))  # another schema too
        out.flush()
        assert out.credits == 7
        inp = RemoteInputChannel(Link(b), 0, 1, capacity=10)
        frames = _pump(link, inp.link, 3)
        _deliver(frames, inp)
        first, second, third = _drain(inp)
        assert first == [1, 2, 3, 4, 5]
        assert isinstance(second, pa.RecordBatch) and second.equals(schema_a)
        assert isinstance(third, pa.RecordBatch) and third.schema.names == ["w"]
    finally:
        link.close()
        b.close()


def test_arrow_batches_of_one_schema_are_joined_into_one() -> None:
    a, b = _tcp_pair()
    link, peer = Link(a), Link(b)
    try:
        out = RemoteOutputChannel(link, 0, 1, capacity=10, batch_size=100, flush_interval=60.0)
        out.send(pa.RecordBatch.from_pydict({"v": [1, 2]}))
        out.send(pa.RecordBatch.from_pydict({"v": [3]}))
        out.flush()
        ((kind, _, _, payload),) = _pump(link, peer, 1)
        assert kind == DATA_ARROW
        assert decode_arrow(payload).column("v").to_pylist() == [1, 2, 3]
    finally:
        link.close()
        peer.close()


def test_a_buffered_batch_leaves_once_its_flush_interval_passed(links: tuple[Link, Link]) -> None:
    left, _ = links
    out = RemoteOutputChannel(left, 0, 1, capacity=10, batch_size=1000, flush_interval=5.0)
    out.send([1])
    out.flush_if_due(time.monotonic())
    assert not left.wants_write
    out.flush_if_due(time.monotonic() + 5.0)
    assert left.wants_write and out.credits == 9


def test_each_frame_spends_a_credit_and_grants_restore_them(links: tuple[Link, Link]) -> None:
    left, _ = links
    out = RemoteOutputChannel(left, 0, 1, capacity=2, batch_size=1, flush_interval=60.0)
    assert out.has_capacity()
    out.send([1])
    out.send(Barrier(1, 0.0))
    assert out.credits == 0 and not out.has_capacity()
    out.grant(1)
    assert out.has_capacity()


def test_an_elastic_channel_never_runs_out_of_credit(links: tuple[Link, Link]) -> None:
    left, _ = links
    out = RemoteOutputChannel(left, 0, 1, capacity=1, batch_size=1, flush_interval=60.0, elastic=True)
    for i in range(5):
        out.send([i])
    assert out.credits == -4 and out.has_capacity()


def test_the_consumer_returns_credit_after_half_its_capacity_was_polled(links: tuple[Link, Link]) -> None:
    left, right = links
    inp = RemoteInputChannel(right, 6, 2, capacity=4)
    for i in range(4):
        inp.deliver(DATA_PICKLE, pickle.dumps([i]))
    assert inp.peek() == [0] and len(inp) == 4  # peeking returns no credit
    assert inp.poll() == [0]
    assert not right.wants_write
    assert inp.poll() == [1]
    ((kind, attempt, channel, payload),) = _pump(right, left, 1)
    assert (kind, attempt, channel, parse_credit(payload)) == (CREDIT, 2, 6, 2)
    assert inp.poll() == [2] and inp.poll() == [3] and inp.poll() is None and not inp
    assert [parse_credit(p) for *_, p in _pump(right, left, 1)] == [2]


def test_credits_bound_what_is_in_flight_and_everything_arrives(links: tuple[Link, Link]) -> None:
    left, right = links
    capacity = 3
    out = RemoteOutputChannel(left, 0, 1, capacity=capacity, batch_size=1, flush_interval=60.0)
    inp = RemoteInputChannel(right, 0, 1, capacity=capacity)
    to_send = [[i] for i in range(40)]
    received: list[Element] = []
    in_flight = 0

    def step() -> bool:
        nonlocal in_flight
        while to_send and out.has_capacity():
            out.send(to_send.pop(0))
            in_flight += 1
        assert 0 <= in_flight <= capacity, "the producer ran ahead of its credit"
        left.flush()
        for kind, _, _, payload in right.receive():
            inp.deliver(kind, payload)
        while (element := inp.poll()) is not None:
            received.append(element)
            in_flight -= 1
        right.flush()
        for kind, _, _, payload in left.receive():
            assert kind == CREDIT
            out.grant(parse_credit(payload))
        return not to_send and len(received) == 40

    _wait_until(step, "every batch arrived")
    assert received == [[i] for i in range(40)]


# -- a closed peer ---------------------------------------------------------------------------------
def test_frames_sent_before_the_peer_closed_arrive_then_receive_raises(links: tuple[Link, Link]) -> None:
    left, right = links
    left.send_frame(DATA_PICKLE, 1, 0, b"last words")
    left.flush()
    assert not left.wants_write
    left.close()
    frames: list[Frame] = []

    def closed() -> bool:
        try:
            frames.extend(right.receive())
        except LinkClosed:
            return True
        return False

    _wait_until(closed, "receive raised LinkClosed")
    assert frames == [(DATA_PICKLE, 1, 0, b"last words")]
    assert right.closed


def test_flushing_to_a_closed_peer_raises_link_closed(links: tuple[Link, Link]) -> None:
    left, right = links
    right.close()

    def raised() -> bool:
        left.send_frame(DATA_PICKLE, 1, 0, b"into the void" * 1000)
        try:
            left.flush()
        except LinkClosed:
            return True
        return False

    _wait_until(raised, "flush raised LinkClosed")
    assert left.closed


# -- the blocking helpers --------------------------------------------------------------------------
def test_blocking_helpers_exchange_control_and_hello_objects() -> None:
    a, b = socket.socketpair()
    with a, b:
        write_object_blocking(a, ("hello", 1), 4, HELLO)  # attempt 4
        write_object_blocking(a, {"stop": True})
        assert read_object_blocking(b, timeout=_DEADLINE) == (4, ("hello", 1))
        assert read_object_blocking(b, timeout=_DEADLINE) == (0, {"stop": True})


def test_read_object_blocking_refuses_a_data_frame() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode_frame(DATA_PICKLE, 0, 0, pickle.dumps([1])))
        with pytest.raises(ConnectionError, match="expected a control frame"):
            read_object_blocking(b, timeout=_DEADLINE)


@pytest.mark.parametrize("sent", [b"", encode_frame(CONTROL, 0, 0, b"x")[:5]], ids=["nothing", "half a header"])
def test_read_object_blocking_times_out(sent: bytes) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(sent)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            read_object_blocking(b, timeout=0.05)
        assert time.monotonic() - started < 2.0


def test_read_object_blocking_raises_link_closed_when_the_peer_closes_mid_frame() -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(encode_frame(CONTROL, 0, 0, pickle.dumps("cut short"))[:-2])
        a.close()
        with pytest.raises(LinkClosed):
            read_object_blocking(b, timeout=_DEADLINE)


def test_flush_blocking_gives_up_after_its_timeout(links: tuple[Link, Link]) -> None:
    left, _ = links  # the right end never reads
    left.send_frame(DATA_PICKLE, 0, 0, bytes(32 * 1024 * 1024))
    started = time.monotonic()
    left.flush_blocking(timeout=0.1)
    assert left.wants_write, "a peer that never reads took 32 MiB"
    assert time.monotonic() - started < 2.0
