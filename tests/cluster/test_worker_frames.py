"""A worker's filtering of the frames its peers send (`FrameRouter.on_frame`).

Frames carry the sender's attempt. A frame of an older attempt (sent before a restart) is
dropped; a frame of a newer one (the peer restarted first) is held until this worker starts that
attempt, then delivered in arrival order; a credit frame goes to the output channel it names,
a data or event frame to the input channel it names.

Worker 0 of 2 runs here for real (its tasks built, its channels wired) over loopback links
that nobody reads: the test delivers frames by hand and looks at the channels.
"""

from __future__ import annotations

import pickle
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from epochal import StreamEnvironment
from epochal.cluster.link_guard import LinkGuard
from epochal.cluster.protocol import Start
from epochal.cluster.worker import Worker
from epochal.runtime.wire.elements import END_OF_INPUT, Barrier, Element
from epochal.runtime.wire.handshake import new_secret
from epochal.runtime.wire.network import CONTROL, CREDIT, DATA_ARROW, DATA_PICKLE, EVENT, Link, encode_arrow
from epochal.testing import CollectSink, ListSource

CAPACITY = 4


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


@pytest.fixture
def worker() -> Iterator[Worker]:
    """Worker 0 of a 2-worker job (source → key_by → count → sink), linked to a silent peer."""
    env = StreamEnvironment(parallelism=2, executor="inprocess", channel_capacity=CAPACITY)
    env.from_source(ListSource(list(range(10)), splits=2)).key_by(lambda x: x % 3).count().sink_to(CollectSink())
    job = env.job_graph("frames")
    sockets = [*_tcp_pair(), *_tcp_pair(), socket.socket()]
    # a worker not connected to any job master
    w = Worker(job, 0, 2, 1, ("127.0.0.1", 0), sockets[4], ("127.0.0.1", 0), 0, guard=LinkGuard(new_secret()))
    w.driver.link = Link(sockets[0], "driver")
    w.links[1] = Link(sockets[2], "worker 1")
    yield w
    w._close_tasks()
    w.background.pool.shutdown()
    for s in sockets:
        s.close()


def _start_attempt(worker: Worker, attempt: int) -> None:
    """The job master's Start of `attempt`, without restoring (the one place that builds it)."""
    worker._on_control((CONTROL, 0, 0, pickle.dumps(Start(attempt, None))))


def _wires(worker: Worker) -> tuple[int, int]:
    """The wire ids of this worker's one remote input channel and one remote output channel."""
    (inp,) = worker.frames.inputs
    (out,) = worker.frames.outputs
    assert inp != out
    return inp, out


def _data(records: list[Any]) -> tuple[int, bytes]:
    return DATA_PICKLE, pickle.dumps(records)


def _arrow(batch: pa.RecordBatch) -> tuple[int, bytes]:
    return DATA_ARROW, encode_arrow(batch)


def _event(element: Element) -> tuple[int, bytes]:
    return EVENT, pickle.dumps(element)


def _credit(n: int) -> tuple[int, bytes]:
    return CREDIT, struct.pack("<I", n)


def _send(worker: Worker, attempt: int, wire: int, frame: tuple[int, bytes]) -> None:
    kind, payload = frame
    worker.frames.on_frame(kind, attempt, wire, payload)


def _queued(worker: Worker, wire: int) -> list[Element]:
    channel = worker.frames.inputs[wire]
    out: list[Element] = []
    while (element := channel.poll()) is not None:
        out.append(element)
    return out


def test_frames_of_an_older_attempt_are_dropped(worker: Worker) -> None:
    _start_attempt(worker, 1)
    _start_attempt(worker, 2)
    inp, out = _wires(worker)
    _send(worker, 1, inp, _data(["stale"]))
    _send(worker, 1, inp, _event(END_OF_INPUT))
    _send(worker, 1, out, _credit(3))
    assert _queued(worker, inp) == []
    assert worker.frames.outputs[out].credits == CAPACITY
    _send(worker, 2, inp, _data(["current"]))  # the current attempt's frames still arrive
    assert _queued(worker, inp) == [["current"]]


def test_frames_of_a_newer_attempt_wait_for_it_then_arrive_in_order(worker: Worker) -> None:
    _start_attempt(worker, 1)
    old_in, old_out = _wires(worker)
    old_channel = worker.frames.inputs[old_in]
    batch = pa.RecordBatch.from_pydict({"k": ["a", "b"]})
    early = [_data([1, 2]), _event(Barrier(3, 0.5)), _arrow(batch), _data([3])]
    for frame in early:
        _send(worker, 2, old_in, frame)
    _send(worker, 2, old_out, _credit(2))
    # attempt 1's channels see none of it
    assert len(worker.frames.inputs[old_in]) == 0
    assert worker.frames.outputs[old_out].credits == CAPACITY

    _start_attempt(worker, 2)
    inp, out = _wires(worker)
    assert (inp, out) == (old_in, old_out) and worker.frames.inputs[inp] is not old_channel
    _send(worker, 2, inp, _data([4]))  # after the start: behind the held frames
    received = _queued(worker, inp)
    assert received[:2] == [[1, 2], Barrier(3, 0.5)]
    assert isinstance(received[2], pa.RecordBatch) and received[2].equals(batch)
    assert received[3:] == [[3], [4]]
    assert worker.frames.outputs[out].credits == CAPACITY + 2


def test_frames_of_a_later_attempt_stay_held_while_an_earlier_one_starts(worker: Worker) -> None:
    _start_attempt(worker, 1)
    inp, out = _wires(worker)
    _send(worker, 3, inp, _data(["for attempt 3"]))
    _send(worker, 3, out, _credit(1))
    _start_attempt(worker, 2)
    assert _queued(worker, inp) == []
    assert worker.frames.outputs[out].credits == CAPACITY
    _start_attempt(worker, 3)
    assert _queued(worker, inp) == [["for attempt 3"]]
    assert worker.frames.outputs[out].credits == CAPACITY + 1


def test_credit_frames_go_to_output_channels_and_data_frames_to_input_channels(worker: Worker) -> None:
    _start_attempt(worker, 1)
    inp, out = _wires(worker)
    _send(worker, 1, out, _credit(5))
    _send(worker, 1, inp, _data(["record"]))
    _send(worker, 1, inp, _event(END_OF_INPUT))
    assert worker.frames.outputs[out].credits == CAPACITY + 5
    assert _queued(worker, inp) == [["record"], END_OF_INPUT]
    # crossed over, they reach nothing: an input takes no credit, an output no data
    _send(worker, 1, inp, _credit(7))
    _send(worker, 1, out, _data(["misdirected"]))
    assert worker.frames.outputs[out].credits == CAPACITY + 5
    assert _queued(worker, inp) == []
    # a wire id this worker has no remote channel for is ignored too
    foreign = 1 + max(inp, out)
    _send(worker, 1, foreign, _data(["elsewhere"]))
    _send(worker, 1, foreign, _credit(1))
    assert _queued(worker, inp) == [] and worker.frames.outputs[out].credits == CAPACITY + 5
