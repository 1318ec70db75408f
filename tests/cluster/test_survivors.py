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
    assert new.data() == [[2], [3]], "the replay goes as far as the new consumer's credit"
    out.grant(2)
    assert new.data() == [[2], [3], Watermark(5.0), [4]], "records and watermarks after barrier 1; no barriers"
    out.send(END_OF_INPUT)
    assert new.data()[-1] == END_OF_INPUT and not out.detached


def test_a_log_that_starts_after_the_barrier_replays_whole() -> None:
    out = _output(_Link())
    out.send([7])
    new = _Link()
    out.rejoin(new, 3)  # type: ignore[arg-type]
    assert new.data() == [[7]]


class _Gate:
    """What an `OutputGate` learns from a channel: whether its task is held back."""

    def __init__(self, out: LoggedOutput) -> None:
        self.out, self.full = out, not out.has_capacity()
        out.watch.filled, out.watch.freed = self._filled, self._freed

    def _filled(self) -> None:
        self.full = True

    def _freed(self) -> None:
        self.full = False

    def held(self) -> bool:
        assert self.full == (not self.out.has_capacity()), "the gate and the channel disagree"
        return self.full


def test_a_survivor_is_not_held_back_by_a_lost_consumer() -> None:
    """Issue 37, measured on Spark: the survivor's task, out of credit to the dead worker, stayed
    held back after `detach` (nothing told its gate) and, after `rejoin`, until the restored task
    had taken the whole replay: the kept groups went 772-1,180 ms without output."""
    link = _Link()
    out = _output(link)
    gate = _Gate(out)
    out.send([1])
    out.send([2])  # no credit left: the task waits for the consumer
    assert gate.held()
    out.detach()  # the consumer's worker died: no credit will come back
    assert not gate.held(), "the task runs on, logging what goes to the lost worker"
    for i in range(3, 9):
        out.send([i])
    new = _Link()
    out.rejoin(new, 0)  # type: ignore[arg-type]  # restored from a checkpoint before the log
    assert len(new.data()) == 2 and not gate.held(), "the replay is paced by credit, the task is not"
    out.send([9])
    assert not gate.held()
    out.grant(2)
    out.grant(2)
    out.grant(2)
    assert not gate.held() and new.data() == [[i] for i in range(1, 9)]
    out.grant(1)  # the backlog is sent: flow control holds again
    assert new.data()[-1] == [9] and out.backlog is None and gate.held()
    out.grant(2)
    assert not gate.held()
    out.send([10])
    assert new.data()[-1] == [10]


def test_a_broken_link_detaches_its_channels_at_once(tmp_path: Any) -> None:
    from epochal.cluster.survivors import SurvivorChannels

    dead, other = _Link(), _Link()
    channels = SurvivorChannels(0, True, lambda message: None)
    channels.start(1)
    to_dead = channels.output(1, dead, 0, 1, 1, 1, 0.0, False)  # type: ignore[arg-type]
    to_other = channels.output(2, other, 1, 1, 1, 1, 0.0, False)  # type: ignore[arg-type]
    gate = _Gate(to_dead)  # type: ignore[arg-type]
    to_dead.send([1])
    assert gate.held()
    channels.link_broke(dead)  # type: ignore[arg-type]
    assert not gate.held() and isinstance(to_dead, LoggedOutput) and to_dead.detached
    assert isinstance(to_other, LoggedOutput) and not to_other.detached


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


def test_a_backlog_that_keeps_growing_holds_the_task_back(monkeypatch: Any) -> None:
    """The backlog is bounded: a restored task that cannot keep up slows the survivor down again."""
    from epochal.cluster import survivors

    monkeypatch.setattr(survivors, "_SLACK", 4)
    link = _Link()
    out = _output(link)
    gate = _Gate(out)
    out.detach()
    for i in range(3):
        out.send([i])
    new = _Link()
    out.rejoin(new, 0)  # type: ignore[arg-type]
    assert out.bound == 2 * 3 + 4 and new.data() == [[0], [1]], "the replay goes within credit"
    for i in range(3, 12):
        out.send([i])
        assert not gate.held()
    assert len(out.backlog or ()) == 10
    out.send([12])
    assert gate.held(), "past twice the replay and the slack the task waits"
    out.grant(3)
    assert not gate.held() and out.held is False
    out.grant(20)
    assert out.backlog is None and new.data() == [[i] for i in range(13)] and not gate.held()
