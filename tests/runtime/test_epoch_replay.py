"""Epochs replayed at their cuts after a fallback (`state.replay`): the coordinator triggers the
replayed checkpoints first, under their ids, and gives up the attempt if one does not complete;
a source reads no further than its cut and holds the barrier until it is there; a sink's
lineage goes on across restores and begins anew when checkpoint ids begin again; the built-in
sinks skip an epoch they committed before."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_coordinator import PERIODIC, Harness

from epochal.api.connector import Sink, SinkWriter
from epochal.connectors import FileSink, ParquetSink, read_committed
from epochal.errors import ReplayAbandoned
from epochal.plan.specs import SinkSpec, SourceSpec
from epochal.runtime.clock import VirtualClock
from epochal.runtime.operators.base import OperatorContext
from epochal.runtime.operators.io import SourceOperator
from epochal.runtime.operators.sink import SinkCommits, SinkOperator
from epochal.runtime.wire.messages import TriggerCheckpoint
from epochal.state.keygroups import KeyGroupRange
from epochal.state.replay import EpochReplay, ReplayEpoch, SplitCut
from epochal.testing import CollectSink, ListSource


def test_replayed_checkpoints_are_triggered_first_under_their_ids_then_periodic_ones_after() -> None:
    h = Harness(PERIODIC)
    h.coordinator._next_id = 9
    h.coordinator.replay((6, 4))
    h.at(0.01)  # at once, not after the interval
    triggers = [m for _, m in h.take_sent() if isinstance(m, TriggerCheckpoint)]
    assert {m.checkpoint_id for m in triggers} == {4}
    h.at(0.5)
    assert not h.take_sent()  # one replayed checkpoint at a time
    h.ack_all(4)
    h.take_sent()
    h.at(0.6)
    assert {m.checkpoint_id for _, m in h.take_sent() if isinstance(m, TriggerCheckpoint)} == {6}
    h.ack_all(6)
    h.take_sent()
    h.at(2.0)
    assert {m.checkpoint_id for _, m in h.take_sent() if isinstance(m, TriggerCheckpoint)} == {9}


def test_a_replayed_checkpoint_that_expires_gives_the_attempt_up() -> None:
    h = Harness(PERIODIC)
    h.coordinator._next_id = 9
    h.coordinator.replay((4,))
    h.at(0.01)
    h.at(20.0)  # past the timeout
    assert h.coordinator.is_stopped
    assert len(h.failures) == 1 and isinstance(h.failures[0], ReplayAbandoned)


def _source(records: int = 10, splits: int = 2, parallelism: int = 1) -> SourceOperator:
    spec = SourceSpec("src", "src", ListSource(list(range(records)), splits=splits), None)
    op = SourceOperator(spec)
    op.open(OperatorContext(0, parallelism, 128, KeyGroupRange(0, 128), VirtualClock(), None, "src"))
    return op


def _drain(op: SourceOperator, max_records: int = 4) -> list[Any]:
    out: list[Any] = []
    while (batch := op.poll(max_records)) is not None and (batch or not op.at_cut()):
        out.extend(batch)
        if not batch:
            break
    return out


def test_a_source_reads_to_its_cut_and_no_further_then_on_to_the_next() -> None:
    op = _source()  # list-0: 0..4, list-1: 5..9, read one after the other
    cut_a = SplitCut((("list-0", 3),), frozenset())
    cut_b = SplitCut((("list-1", 2),), frozenset({"list-0"}))
    op.replay_to([(4, cut_a), (6, cut_b)])
    assert op.holds(4) and not op.holds(6)
    assert _drain(op) == [0, 1, 2] and op.at_cut() and not op.holds(4)
    assert op.ready(0.0) is False  # at the cut: its barrier goes first
    assert op.snapshot(4).state.counts == {"list-0": 3}
    op.cut_passed(4)
    assert _drain(op) == [3, 4, 5, 6] and op.at_cut()
    op.cut_passed(6)
    assert _drain(op, 100) == [7, 8, 9]


def test_a_source_counts_records_per_split_and_a_restore_takes_the_counts_back() -> None:
    op = _source()
    op.poll(3)
    state = op.snapshot(1).state
    assert state.counts == {"list-0": 3}
    again = _source()
    again.restore(None, [state])
    assert again.snapshot(2).state.counts == {"list-0": 3}


class _Recording(Sink):
    def __init__(self, committed: list[Any]) -> None:
        self.committed = committed

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _Nothing()

    def commit(self, committables: list[Any]) -> None:
        self.committed.extend(committables)


class _Nothing(SinkWriter):
    def write(self, batch: Any) -> None:
        pass


def _sink(sink: Any, subtask: int = 0, restored: int | None = None) -> SinkOperator:
    op = SinkOperator(SinkSpec("sink", "sink", sink))
    op.open(OperatorContext(subtask, 1, 128, KeyGroupRange(0, 128), VirtualClock(), None, "sink",
                            restored_checkpoint=restored))
    return op


def test_a_sinks_lineage_goes_on_across_restores_and_begins_anew_when_ids_begin_again() -> None:
    first = _sink(CollectSink())
    first.restore(None, [])  # a fresh start
    state = first.snapshot(7).state
    assert isinstance(state, SinkCommits) and state.checkpoint_id == 7 and len(state.lineage) == 16
    restored = _sink(CollectSink())
    restored.restore(None, [state])
    assert restored.snapshot(8).state.lineage == state.lineage  # the same run
    adopted = _sink(CollectSink())
    adopted.restore(None, [state])  # a savepoint of checkpoint 7, adopted as checkpoint 1 elsewhere
    assert adopted.snapshot(2).state.lineage != state.lineage  # ids began again: a new run
    committed: list[Any] = []
    old = _sink(_Recording(committed))
    old.restore(None, [{3: "a commit of before lineages"}])  # a state of an older version: its commits
    assert committed == ["a commit of before lineages"]
    assert old.snapshot(4).state is None  # a writer without a lineage, nothing pending: no state


def test_a_savepoint_adopted_under_another_id_begins_a_new_lineage() -> None:
    """A savepoint of checkpoint 1 adopted as checkpoint 3 of another storage: its ids go on
    above the savepoint's, yet the run that took it may have committed epochs 4, 5... too."""
    first = _sink(CollectSink())
    first.restore(None, [])
    state = first.snapshot(1).state
    same = _sink(CollectSink(), restored=1)
    same.restore(None, [state])
    assert same.snapshot(2).state.lineage == state.lineage  # restored as itself: the same run
    adopted = _sink(CollectSink(), restored=3)
    adopted.restore(None, [state])
    assert adopted.snapshot(4).state.lineage != state.lineage


def test_collect_sink_skips_an_epoch_it_committed_before() -> None:
    sink = CollectSink()
    for records in ([1, 2], [1, 2]):  # the epoch, then its replay at the cut
        op = _sink(sink)
        op.restore(None, [SinkCommits({}, "0123456789abcdef", 3)])
        op.process(records)
        op.snapshot(4)
        op.notify_checkpoint_complete(4)
    assert sink.committed() == [1, 2]


@pytest.mark.parametrize("kind", ["file", "parquet"])
def test_file_sinks_skip_an_epoch_they_committed_before_and_drop_its_staged_file(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    for records in ([(1, "a"), (2, "b")], [(1, "a"), (2, "b")]):
        sink = FileSink(str(out), mode="append") if kind == "file" else ParquetSink(str(out), mode="append")
        op = _sink(sink)
        op.restore(None, [SinkCommits({}, "0123456789abcdef", 3)])
        op.process(records)
        op.snapshot(4)
        op.notify_checkpoint_complete(4)
        op.close()
    names = sorted(os.listdir(out))
    assert [n for n in names if n.startswith("part-")] == [
        f"part-00000-00000004-0123456789ab.{'jsonl' if kind == 'file' else 'parquet'}"]
    assert not [n for n in names if n.endswith(".inprogress")]
    assert len(read_committed(str(out))) == 2


def test_an_epoch_replay_carries_cuts_per_source() -> None:
    replay = EpochReplay((ReplayEpoch(4, (("src", SplitCut((("a", 3),), frozenset())),)),
                          ReplayEpoch(6, (("src", SplitCut((("a", 5),), frozenset({"b"}))),))))
    assert replay.checkpoint_ids == (4, 6)
    assert [k for k, _ in replay.cuts_of("src")] == [4, 6] and replay.cuts_of("other") == []
    assert replay.cuts_of("src")[1][1].count("a") == 5 and replay.cuts_of("src")[1][1].count("z") == 0
