"""`FailureManager` alone: the restart budget, poison pills, and what a restart restores."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.errors import CorruptCheckpointError, JobFailedError, RecordError
from epochal.runtime.master.failure_manager import FailureManager
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource


def _job(directory: Path | None, restarts: int = 2):  # noqa: ANN202
    checkpoint = CheckpointConfig(interval=0.002, directory=str(directory) if directory else None)
    env = StreamEnvironment(parallelism=1, checkpoint=checkpoint, executor="inprocess",
                            restart=RestartStrategy(max_restarts=restarts))
    env.from_source(ListSource(list(range(200)), batch_size=2)).key_by(lambda x: x % 3).count().sink_to(CollectSink())
    return env.job_graph("fm")


def _record_error(value: object) -> RecordError:
    return RecordError("map", value, ValueError("bad"))


def test_the_budget_allows_max_restarts_then_fails_with_the_cause() -> None:
    manager = FailureManager(_job(None, restarts=2), None, None, 0)
    manager.failed(RuntimeError("one"), 1, None)
    manager.failed(RuntimeError("two"), 2, None)
    with pytest.raises(JobFailedError) as failed:
        manager.failed(RuntimeError("three"), 3, None)
    assert manager.restarts == 2 and failed.value.attempts == 3 and not failed.value.recurring
    assert manager.failures == ["RuntimeError: one", "RuntimeError: two", "RuntimeError: three"]
    assert str(failed.value.__cause__) == "three"


def test_the_same_record_failing_twice_in_a_row_is_not_retried_again() -> None:
    manager = FailureManager(_job(None, restarts=10), None, None, 0)
    manager.failed(_record_error(7), 1, None)
    manager.failed(_record_error(8), 2, None)  # another record: retried
    with pytest.raises(JobFailedError) as failed:
        manager.failed(_record_error(8), 3, None)
    assert failed.value.recurring and manager.restarts == 2


def test_without_storage_a_restart_starts_from_scratch() -> None:
    assert FailureManager(_job(None), None, None, 0).latest_restorable({1, 2}) is None


def test_the_latest_restorable_is_of_this_runs_lineage_and_skips_refused_ones(tmp_path: Path) -> None:
    InProcessExecutor(virtual_time=True).execute(_job(tmp_path / "c"))
    storage = CheckpointStorage(str(tmp_path / "c"))
    complete = storage.complete_checkpoints()
    assert len(complete) >= 3
    older, newest = complete[0], complete[-1]
    # a run started from `older` that completed nothing yet: newer checkpoints are an earlier run's
    started = FailureManager(_job(tmp_path / "c"), storage, older, 0)
    restored = started.latest_restorable(set())
    assert restored is not None and restored.checkpoint_id == older
    # a run that completed them all restores the newest, unless it was found corrupt restoring it
    own = FailureManager(_job(tmp_path / "c"), storage, None, 0)
    latest = own.latest_restorable(set(complete))
    assert latest is not None and latest.checkpoint_id == newest
    own.failed(CorruptCheckpointError("flipped bit"), 2, latest)
    again = own.latest_restorable(set(complete))
    assert again is not None and again.checkpoint_id == complete[-2] and own.refused == {newest}
