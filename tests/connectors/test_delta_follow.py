"""DeltaSource(follow=True): a table's new versions read as they are committed, each once, the
non-append versions refused by name or passed over as asked, a version log cleanup deleted
refused by name; a source made anew on a restored checkpoint goes on after its versions;
Delta -> Epochal -> Delta runs continuously, exactly once, through a crash."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_file_formats import read_all

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment
from epochal.connectors import DeltaSink, DeltaSource
from epochal.connectors.delta.source import SnapshotSplit, VersionFileSplit
from epochal.errors import EpochalError, InjectedFailure, JobFailedError
from spark_jobs import wait_until

deltalake = pytest.importorskip("deltalake")


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "amount": [i % 17 for i in ids], "region": [f"r{i % 3}" for i in ids]})


def _append(path: str, start: int, n: int) -> None:
    deltalake.write_deltalake(path, _rows(start, n), partition_by=["region"], mode="append")


def _ids(source: DeltaSource) -> list[int]:
    return sorted(r["id"] for r in read_all(source, batch=40))


def test_follow_reads_the_snapshot_then_each_new_version_once(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 100)
    source = DeltaSource(path, follow=True)
    assert source.discovery_interval() == 1.0
    _append(path, 100, 50)
    _append(path, 150, 50)
    splits = source.splits()
    assert [s.split_id for s in splits] == [s.split_id for s in source.splits()]  # stable
    assert [getattr(s, "version", 0) for s in splits][-6:] == [1, 1, 1, 2, 2, 2]
    rows = read_all(source, batch=33, reopen=True)
    assert sorted(r["id"] for r in rows) == list(range(200))
    assert all(r["region"] == f"r{r['id'] % 3}" and r["amount"] == r["id"] % 17 for r in rows)
    assert _ids(DeltaSource(path, follow=True, starting_version=2)) == list(range(150, 200))
    later = time.time()
    time.sleep(0.05)
    _append(path, 200, 10)
    assert _ids(DeltaSource(path, follow=True, starting_timestamp=later)) == list(range(200, 210))


def test_a_delete_is_refused_by_version_or_passed_over_as_asked(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 100)
    source = DeltaSource(path, follow=True)
    deltalake.DeltaTable(path).delete("id < 10")  # version 1: rewrites or removes files
    _append(path, 100, 10)
    splits = source.splits()
    with pytest.raises(EpochalError, match=r"^DeltaSource: version 1 of .* is not an append \(DELETE"):
        source.open_split(splits[-1], None)
    with pytest.raises(EpochalError, match="version 1 .* ignore_deletes=True .* skip_change_commits=True"):
        DeltaSource(path, follow=True, starting_version=1).check()
    assert _ids(DeltaSource(path, follow=True, starting_version=1, skip_change_commits=True)) == list(range(100, 110))


def test_ignore_deletes_passes_over_versions_that_only_remove(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 30)
    source = DeltaSource(path, follow=True, ignore_deletes=True)
    deltalake.DeltaTable(path).delete("region = 'r1'")  # whole partition files: removes only
    _append(path, 30, 6)
    assert _ids(source) == list(range(36))
    deltalake.write_deltalake(path, _rows(50, 5), partition_by=["region"], mode="overwrite")
    with pytest.raises(EpochalError, match="version 3 .* not an append"):
        source.check()


def test_a_schema_change_fails_naming_the_version(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 10)
    source = DeltaSource(path, follow=True, skip_change_commits=True)
    wider = _rows(10, 5).append_column("extra", pa.array(["x"] * 5))
    deltalake.write_deltalake(path, wider, partition_by=["region"], mode="append", schema_mode="merge")
    with pytest.raises(EpochalError, match="version 1 of .* changes the table's schema"):
        source.check()


def test_delta_to_delta_runs_continuously_exactly_once_through_a_crash(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "in"), str(tmp_path / "out")
    _append(src, 0, 200)
    crashed: list[int] = []

    def crash_once(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if row[0] == 450 and not crashed:
            crashed.append(1)
            raise InjectedFailure("crash")
        return row

    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")),
                            restart=RestartStrategy(max_restarts=2, delay=0.0))
    schema = pa.schema([("id", pa.int64()), ("amount", pa.int64())])
    (env.from_source(DeltaSource(src, follow=True, poll_interval=0.05)).map(crash_once)
        .map(lambda r: (r[0], r[1] * 10)).sink_to(DeltaSink(dst, schema=schema)))
    handle = env.execute_async("delta-follow")
    for i in range(1, 6):  # versions committed while the job runs
        seen = handle.status().last_checkpoint or 0
        wait_until(lambda seen=seen: (handle.status().last_checkpoint or 0) > seen or handle.done(), "a checkpoint")
        _append(src, i * 100 + 100, 100)

    def out() -> list[int]:
        return sorted(deltalake.DeltaTable(dst).to_pyarrow_table().column("id").to_pylist())

    wait_until(lambda: len(out()) >= 700 or handle.done(), "every version is in the output", 120)
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)
    assert crashed and handle.status().restarts == 1
    assert out() == list(range(700))
    table = deltalake.DeltaTable(dst).to_pyarrow_table()
    assert all(a == (i % 17) * 10 for i, a in zip(table.column("id").to_pylist(), table.column("amount").to_pylist()))


def test_a_version_refused_while_running_fails_the_job_naming_it(tmp_path: Path) -> None:
    src = str(tmp_path / "in")
    _append(src, 0, 20)
    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy(max_restarts=0),
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")))
    from epochal.testing import CollectSink

    env.from_source(DeltaSource(src, follow=True, poll_interval=0.05)).sink_to(CollectSink())
    handle = env.execute_async("refused")
    wait_until(lambda: (handle.status().last_checkpoint or 0) >= 1, "a checkpoint")
    deltalake.DeltaTable(src).delete("id = 3")
    with pytest.raises(JobFailedError, match="version 1 of .* is not an append"):
        handle.result(timeout=60)


def _read(source: DeltaSource, splits: list[Any]) -> list[int]:
    ids = []
    for split in splits:
        reader = source.open_split(split, None)
        while (got := reader.read(25)) is not None:
            ids.extend(got.column("id").to_pylist())
    return sorted(ids)


def _clean_log(path: str) -> list[str]:
    """One more version and a checkpoint at it, the log's files made 40 days old, then delta-rs's
    log cleanup: what a table's log looks like once `delta.logRetentionDuration` (30 days) passed."""
    _append(path, 10_000, 3)
    table = deltalake.DeltaTable(path)
    table.create_checkpoint()
    log_dir, old = os.path.join(path, "_delta_log"), time.time() - 40 * 86_400
    for name in os.listdir(log_dir):
        os.utime(os.path.join(log_dir, name), (old, old))
    table.cleanup_metadata()
    return sorted(os.listdir(os.path.join(path, "_delta_log")))


def test_a_version_log_cleanup_deleted_fails_naming_the_table_and_the_oldest_version_left(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 30)
    source = DeltaSource(path, follow=True)  # at version 0: version 1 is the next it needs
    for i in range(1, 4):
        _append(path, i * 100, 10)
    assert [s.version for s in source.splits() if isinstance(s, VersionFileSplit)] == [1] * 3 + [2] * 3 + [3] * 3
    lagging = DeltaSource(path, follow=True, starting_version=2)
    assert _clean_log(path) == ["00000000000000000004.checkpoint.parquet", "00000000000000000004.json",
                                "_last_checkpoint"]
    with pytest.raises(EpochalError, match=(
            rf"^DeltaSource: {path}: version 2 is no longer in the table's log: "
            r"_delta_log/00000000000000000002.json was cleaned up .*; the oldest version the log still has is 4 "
            r"\(oldest checkpoint: 4\); start a new job from a version it has \(starting_version=...\)")) as failed:
        lagging.check()
    assert "\n" not in str(failed.value)
    with pytest.raises(EpochalError, match="version 2 is no longer in the table's log"):  # nor when it runs
        lagging.open_split(lagging.splits()[-1], None)
    from epochal.testing import CollectSink

    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(DeltaSource(path, follow=True, starting_version=1)).sink_to(CollectSink())
    with pytest.raises(EpochalError, match="version 1 is no longer in the table's log"):  # before the job starts
        env.execute("cleaned")
    worker = pickle.loads(pickle.dumps(source))  # a process that reads the snapshot of version 0 now
    with pytest.raises(EpochalError, match=(
            rf"^DeltaSource: {path}: the table can no longer be read at version 0: log cleanup .* deleted the log "
            r"before it; the oldest version the log still has is 4 \(oldest checkpoint: 4\); start a new job")):
        worker.open_split(source.splits()[0], None).read(10)
    # a source that read versions 1 to 3 before the cleanup waits for version 5 as ever
    assert [s.error for s in source.splits() if isinstance(s, VersionFileSplit)][-3:] == ["", "", ""]
    assert not [s for s in source.splits() if getattr(s, "error", "")]
    assert _ids(DeltaSource(path, follow=True, starting_version=4)) == [10_000, 10_001, 10_002]


def test_a_source_made_anew_on_a_restored_checkpoint_goes_on_after_its_versions(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 60)
    first = DeltaSource(path, follow=True, ignore_deletes=True)
    _append(path, 100, 30)  # version 1
    restored = list(first.splits())  # the split log of the checkpoint the driver restarts from
    assert {type(s) for s in restored} == {SnapshotSplit, VersionFileSplit}
    deltalake.DeltaTable(path).delete("region = 'r1'")  # version 2, passed over: snapshot files gone
    _append(path, 200, 30)  # version 3, while the driver is down
    again = DeltaSource(path, follow=True, ignore_deletes=True)  # the job file run again: pinned at 3
    worker = pickle.loads(pickle.dumps(again))  # a worker's copy, shipped before the restore
    again.check()  # the start checks list it before the job master restores the log
    again.resumed(restored)
    new = [s for s in again.splits() if s.split_id not in {r.split_id for r in restored}]
    assert [getattr(s, "version", None) for s in new] == [3, 3, 3]  # not a newer snapshot
    assert _read(worker, restored + new) == list(range(60)) + list(range(100, 130)) + list(range(200, 230))
    _append(path, 300, 6)
    assert [s.version for s in again.splits()[len(new):]] == [4, 4, 4]


def test_a_resumed_source_fails_on_a_version_cleaned_while_its_job_was_down(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    _append(path, 0, 30)
    first = DeltaSource(path, follow=True)
    _append(path, 100, 3)
    restored = list(first.splits())
    _append(path, 200, 3)  # version 2: never read, then cleaned from the log
    _clean_log(path)
    again = DeltaSource(path, follow=True)
    again.resumed(restored)
    with pytest.raises(EpochalError, match="version 2 is no longer in the table's log.* still has is 3"):
        again.check()
