"""The split enumerator on the job master: which subtask reads a found split, what goes ahead of
a trigger, and the split log as checkpoints store it (incremental segments, on a real storage)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from epochal import Source, SplitReader, StreamEnvironment
from epochal.errors import CorruptCheckpointError
from epochal.plan.job_graph import JobGraph, TaskId
from epochal.runtime.master.enumerator import SplitEnumerators
from epochal.runtime.wire.messages import AssignSplits
from epochal.state.manifest import Manifest, SplitLogState
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink


@dataclass(frozen=True)
class Part:
    split_id: str


class Growing(Source):
    """A source whose listing is whatever the test put in `parts` (shared, in-process)."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.fail = False

    def splits(self) -> list[Part]:
        if self.fail:
            raise OSError("the store is down")
        return list(self.parts)

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        raise AssertionError("not read here")

    def discovery_interval(self) -> float:
        return 1.0


def _job(source: Growing, parallelism: int = 2) -> JobGraph:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess")
    env.from_source(source).uid("files").sink_to(CollectSink())
    return env.job_graph("enumerate")


def _started(source: Growing, parallelism: int = 2, restore: Manifest | None = None, storage: Any = None) -> tuple[
    SplitEnumerators, list[tuple[TaskId, AssignSplits]]
]:
    job = _job(source, parallelism)
    sent: list[tuple[TaskId, AssignSplits]] = []
    enumerators = SplitEnumerators(job, restore, storage)
    enumerators.start_attempt(job, lambda task, message: sent.append((task, message)), restore)  # type: ignore[arg-type]
    return enumerators, sent


def _owners(sent: list[tuple[TaskId, AssignSplits]]) -> dict[str, int]:
    return {split.split_id: task.subtask for task, message in sent for split in message.splits}


def test_found_splits_go_to_subtask_index_modulo_parallelism_each_once() -> None:
    source = Growing()
    source.parts = [Part("a"), Part("b"), Part("c")]
    enumerators, sent = _started(source)
    enumerators.tick(0.0)
    assert _owners(sent) == {"a": 0, "b": 1, "c": 0}
    source.parts = [Part("a"), Part("b"), Part("c"), Part("d")]  # one new: appended, the rest known
    enumerators.tick(0.5)  # not due yet
    assert len(sent) == 2
    enumerators.tick(1.0)
    assert _owners(sent[2:]) == {"d": 1}
    assert enumerators.next_deadline() == 2.0


def test_a_trigger_sends_what_is_due_first_and_marks_the_log_length() -> None:
    source = Growing()
    enumerators, sent = _started(source)
    enumerators.tick(0.0)
    source.parts = [Part("a"), Part("b")]
    enumerators.logs[0].discover(0.1)  # found, not yet sent
    assert sent == []
    assert enumerators.mark() == {"files": 2}
    assert _owners(sent) == {"a": 0, "b": 1}


def test_a_failed_listing_is_retried_and_the_job_goes_on() -> None:
    source = Growing()
    source.parts, source.fail = [Part("a")], True
    enumerators, sent = _started(source)
    enumerators.tick(0.0)
    assert sent == [] and enumerators.next_deadline() == 1.0
    source.fail = False
    enumerators.tick(1.0)
    assert _owners(sent) == {"a": 0}


def test_the_split_log_is_stored_in_segments_one_per_checkpoint_that_found_something(tmp_path: Path) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    source = Growing()
    enumerators, _ = _started(source)
    states = []
    for checkpoint_id, parts in enumerate((["a", "b"], ["a", "b"], ["a", "b", "c"]), start=1):
        source.parts = [Part(p) for p in parts]
        enumerators.tick(float(checkpoint_id))
        (state,) = enumerators.persist(storage, checkpoint_id, enumerators.mark())
        enumerators.completed((state,))
        states.append(state)
    assert [s.length for s in states] == [2, 2, 3]
    assert [len(s.segments) for s in states] == [1, 1, 2]  # checkpoint 2 found nothing: no file
    assert states[2].segments[0] == states[0].segments[0]  # shared with checkpoint 1

    # a new job master started from checkpoint 3 reads the log back, and sends all of it again
    manifest = Manifest(3, "enumerate", 0.0, 0.0, (), split_logs=(states[2],))
    restored, sent = _started(Growing(), parallelism=3, restore=manifest, storage=storage)
    restored.flush()
    assert _owners(sent) == {"a": 0, "b": 1, "c": 2}


def test_a_split_log_whose_segments_disagree_with_the_manifest_is_not_loaded(tmp_path: Path) -> None:
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    source = Growing()
    source.parts = [Part("a")]
    enumerators, _ = _started(source)
    enumerators.tick(0.0)
    (state,) = enumerators.persist(storage, 1, enumerators.mark())
    manifest = Manifest(1, "enumerate", 0.0, 0.0, (), split_logs=(SplitLogState("files", 2, state.segments),))
    with pytest.raises(CorruptCheckpointError, match="split log holds 1 splits, the manifest says 2"):
        _started(Growing(), restore=manifest, storage=storage)
