"""Survivors without a rollback, in parts: the upstream log and the counting input channel
(`epochal.cluster.survivors`), and the plan that says when it is sound
(`epochal.runtime.master.survivors`). The whole, SIGKILLed on Spark: tests/fault/test_spark_survivors.py."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from epochal import CheckpointConfig, RecoveryConfig, StreamEnvironment
from epochal.cluster.survivors import CountingInput, LoggedOutput
from epochal.connectors import FileSink
from epochal.runtime.master.survivors import SurvivorPlan, survivor_plan
from epochal.runtime.wire.elements import END_OF_INPUT, Barrier, Watermark
from epochal.runtime.wire.network import CREDIT, DATA_PICKLE, EVENT
from epochal.state.manifest import Manifest
from epochal.testing import CollectSink, ListSource


class _Link:
    """What a channel sends on a link: `(kind, payload)` frames."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []

    def send_frame(self, kind: int, attempt: int, channel: int, payload: bytes) -> None:
        self.frames.append((kind, payload))

    def data(self) -> list[Any]:
        return [pickle.loads(p) for k, p in self.frames if k in (DATA_PICKLE, EVENT)]


def _output(link: _Link) -> LoggedOutput:
    return LoggedOutput(link, 0, 1, capacity=2, batch_size=1, flush_interval=0.0)  # type: ignore[arg-type]


def test_the_upstream_log_replays_what_came_after_the_restored_checkpoint_s_barrier() -> None:
    link = _Link()
    out = _output(link)
    for element in ([1], Barrier(1, 0.0), [2], Barrier(2, 0.0), [3], Watermark(5.0)):
        out.send(element)
    out.completed(1)  # checkpoint 1 is complete: nothing before its barrier is ever replayed
    assert list(out.log) == [[2], Barrier(2, 0.0), [3], Watermark(5.0)]
    out.detach()  # the consumer's worker died: log only, never hold the task back
    assert out.has_capacity() and out.credits <= 0
    sent = len(link.frames)
    out.send([4])
    assert len(link.frames) == sent, "nothing goes to a dead worker"
    new = _Link()
    assert out.rejoin(new, 1) == 3  # type: ignore[arg-type]
    assert new.data() == [[2], [3], Watermark(5.0), [4]], "records and watermarks after barrier 1; no barriers"
    out.send(END_OF_INPUT)
    assert new.data()[-1] == END_OF_INPUT and not out.detached


def test_a_log_that_starts_after_the_barrier_replays_whole() -> None:
    out = _output(_Link())
    out.send([7])
    new = _Link()
    out.rejoin(new, 3)  # type: ignore[arg-type]
    assert new.data() == [[7]]


def _input(restored_from: int | None = None) -> tuple[CountingInput, _Link]:
    link = _Link()
    return CountingInput(link, 0, 1, capacity=2, restored_from=restored_from), link  # type: ignore[arg-type]


def _deliver(inp: CountingInput, element: Any) -> None:
    inp.deliver(EVENT if not isinstance(element, list) else DATA_PICKLE, pickle.dumps(element))


def test_an_input_drops_what_a_restored_producer_sends_again() -> None:
    inp, _ = _input()
    for element in ([1, 2], Barrier(1, 0.0), [3, 4, 5], Barrier(2, 0.0), [6]):
        _deliver(inp, element)
    assert inp.accepted == 6 and inp.at_barrier == {1: 2, 2: 5}
    new = _Link()
    inp.rejoin(new, 1)  # type: ignore[arg-type]  # restored from checkpoint 1: it sends 3, 4, ... again
    assert inp.skip == 4
    for element in ([3, 4], Watermark(1.0), Barrier(9, 0.0), [5, 6, 7], [8]):
        _deliver(inp, element)
    queued = []
    while (element := inp.poll()) is not None:
        queued.append(element)
    assert queued == [[1, 2], Barrier(1, 0.0), [3, 4, 5], Barrier(2, 0.0), [6], [7], [8]]
    assert inp.skip == 0 and inp.accepted == 8
    assert any(kind == CREDIT for kind, _ in new.frames), "dropped frames give their credit back"


def test_a_restored_channel_counts_from_its_checkpoint() -> None:
    inp, _ = _input(restored_from=4)
    _deliver(inp, [1, 2, 3])
    inp.rejoin(_Link(), 4)  # type: ignore[arg-type]
    assert inp.skip == 3


# -- the plan ------------------------------------------------------------------------------------
def _manifest(checkpoint_id: int = 5) -> Manifest:
    return Manifest(checkpoint_id, "job", 0.0, 0.0, ())


def _job(tmp_path: Any, splits: int = 2, survivors: bool = True, shape: str = "keyed", mode: str = "aligned") -> Any:
    env = StreamEnvironment(parallelism=2, executor="inprocess", recovery=RecoveryConfig(survivors=survivors),
                            checkpoint=CheckpointConfig(directory=str(tmp_path), mode=mode))  # type: ignore[arg-type]
    stream = env.from_source(ListSource(range(10), splits=splits)).map(lambda x: x)
    if shape == "keyed":
        stream.key_by(lambda x: x).count().sink_to(FileSink(str(tmp_path / "out")))
    elif shape == "two shuffles":
        stream.key_by(lambda x: x).count().key_by(lambda t: t[1]).count().sink_to(CollectSink())
    else:
        def body(loop: Any) -> tuple[Any, Any]:
            return loop.filter(lambda x: False), loop

        stream.iterate(body).sink_to(CollectSink())
    return env.job_graph("plan")


def _plan(job: Any, lost: set[int] | None = None, manifest: Manifest | None = None, **kw: Any) -> Any:
    return survivor_plan(job, manifest if manifest is not None else _manifest(), lost or {1}, 2,
                         discovering=kw.get("discovering", False), busy=kw.get("busy"))


def test_the_usual_shape_qualifies(tmp_path: Any) -> None:
    assert _plan(_job(tmp_path)) == SurvivorPlan(frozenset({1}), 5)


@pytest.mark.parametrize(("kw", "why"), [
    ({"survivors": False}, "RecoveryConfig(survivors=True) is not set"),
    ({"splits": 4}, "reads 2 splits"),
    ({"shape": "two shuffles"}, "is not a source"),
    ({"shape": "loop"}, "the job has loops"),
    ({"mode": "unaligned"}, "checkpoints are unaligned"),
])
def test_what_rolls_back_whole_says_why(tmp_path: Any, kw: dict[str, Any], why: str) -> None:
    plan = _plan(_job(tmp_path, **kw))
    assert isinstance(plan, str) and why in plan


def test_no_checkpoint_a_discovering_source_or_work_under_way_roll_back(tmp_path: Any) -> None:
    job = _job(tmp_path)
    assert "no complete checkpoint" in survivor_plan(job, None, {1}, 2, discovering=False, busy=None)  # type: ignore[operator]
    assert "finds splits" in _plan(job, discovering=True)
    assert _plan(job, busy="a patch is under way") == "a patch is under way"
    assert "no worker survived" in _plan(job, lost={0, 1})
