"""A job's max parallelism changed through a savepoint: keyed state re-split into other key
groups offline (`state/regroup.py`, `epochal savepoint rescale-groups`)."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from epochal import CheckpointConfig, JobFailedError, RestartStrategy, StateConfig, StreamEnvironment
from epochal.cli.main import main
from epochal.errors import CheckpointError
from epochal.runtime.windowing.session_columns import SessionRows
from epochal.runtime.windowing.session_state import SESSIONS_STATE, GroupSessions
from epochal.runtime.windowing.table_state import SPLITTERS, TABLE_STATE, GroupSlices, split_group_slices
from epochal.state.keygroups import key_group_of
from epochal.state.reader import open_checkpoint, read_state
from epochal.state.regroup import regroup_savepoint
from epochal.state.savepoints import create_savepoint
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource

ITEMS = [(f"k{i % 37}", i) for i in range(600)]
MORE = [(f"k{i % 41}", i) for i in range(300)]


def _job(directory: Path, items: list[tuple[str, int]], max_parallelism: int, parallelism: int) -> tuple[
        StreamEnvironment, CollectSink]:
    env = StreamEnvironment(
        parallelism=parallelism, executor="inprocess", restart=RestartStrategy.none(),
        checkpoint=CheckpointConfig(interval=0.005, directory=str(directory), retain=1),
        state=StateConfig(max_parallelism=max_parallelism),
    )
    sink = CollectSink()
    # source and sink are new in every job (the input is other records): only the counts carry over
    source = env.from_source(ListSource(items, splits=2, batch_size=7), name=f"src-{directory.name}")
    source.key_by(lambda r: r[0]).count().uid("counts").sink_to(sink, name=f"out-{directory.name}")
    return env, sink


def _entries(path: str) -> dict[tuple[object, str], object]:
    return {(row.key, row.state): row.value for row in read_state(path, "counts")}


@pytest.mark.parametrize("groups", [1024, 16])
def test_a_job_goes_on_from_its_state_in_other_key_groups(tmp_path: Path, groups: int) -> None:
    env, _ = _job(tmp_path / "first", ITEMS, 128, 2)
    env.execute("first")
    target = str(tmp_path / "sp")
    manifest = regroup_savepoint(str(tmp_path / "first"), target, groups)
    assert {op.max_parallelism for op in manifest.operators} == {groups}
    assert len(manifest.merged) == 1  # one file holds it all
    before, after = _entries(str(tmp_path / "first")), _entries(target)
    assert after == before and before  # every entry, once, with its value
    for row in read_state(target, "counts"):
        assert row.key_group == key_group_of(row.key, groups)  # each where its key now hashes
    # a job with the new number of key groups starts from it, wider than before, and counts on
    env, sink = _job(tmp_path / "second", MORE, groups, 4)
    env.execute("second", from_checkpoint=target, allow_non_restored_state=True)
    old = collections.Counter(k for k, _ in ITEMS)
    totals = collections.Counter(k for k, _ in MORE)
    assert sorted(sink.committed()) == sorted(
        (k, old[k] + n) for k, c in totals.items() for n in range(1, c + 1))


def test_the_old_number_of_key_groups_is_refused_with_the_way_out(tmp_path: Path) -> None:
    env, _ = _job(tmp_path / "first", ITEMS, 128, 2)
    env.execute("first")
    savepoint = str(tmp_path / "sp")
    create_savepoint(CheckpointStorage(str(tmp_path / "first")), "latest", savepoint)
    env, _ = _job(tmp_path / "second", MORE, 256, 2)
    with pytest.raises(JobFailedError, match="128 key groups.*max_parallelism=256.*rescale-groups"):
        env.execute("second", from_checkpoint=savepoint, allow_non_restored_state=True)


def test_the_command_line_writes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env, _ = _job(tmp_path / "first", ITEMS, 128, 2)
    env.execute("first")
    target = str(tmp_path / "sp")
    assert main(["savepoint", "rescale-groups", str(tmp_path / "first"), target, "--max-parallelism", "4096"]) == 0
    assert "4,096 key groups" in capsys.readouterr().out
    assert open_checkpoint(target).operator("counts").max_parallelism == 4096
    assert main(["savepoint", "rescale-groups", str(tmp_path / "first"), target, "--max-parallelism", "8"]) == 1
    assert "not empty" in capsys.readouterr().err
    assert main(["savepoint", "rescale-groups", str(tmp_path / "first"), str(tmp_path / "x"),
                 "--max-parallelism", "40000"]) == 1
    assert "32768" in capsys.readouterr().err


def test_state_kept_per_key_group_needs_a_splitter() -> None:
    from epochal.state.regroup import _resplit

    keys = ("a", "b", "c", "d", "e")
    rows = len(keys)
    table = GroupSlices(keys, np.arange(rows, dtype=np.float64), np.array([0.0, 10.0]), np.array([10.0, 20.0]),
                        np.arange(rows * 2).reshape(rows, 2), None, None)
    groups = {7: {TABLE_STATE: {7: table}}}
    with pytest.raises(CheckpointError, match="not per key"):
        _resplit("w", groups, 128, 4096, {})
    out = _resplit("w", groups, 128, 4096, SPLITTERS)
    seen = []
    for group, states in out.items():
        entry = states[TABLE_STATE][group]
        for i, key in enumerate(entry.keys):
            assert key_group_of(key, 4096) == group
            row = keys.index(key)
            assert entry.fired[i] == row and list(entry.counts[i]) == [2 * row, 2 * row + 1]
            seen.append(key)
    assert sorted(seen) == list(keys)
    assert split_group_slices(3, "not a table", 3, 16) == {key_group_of(3, 16): "not a table"}


def test_a_session_table_entry_is_split_by_its_keys_groups() -> None:
    from epochal.state.regroup import _resplit

    keys = ("a", "b", "c", "d", "e")
    key_row = np.array([0, 0, 1, 2, 3, 4, 4, 4])  # two sessions of a, one of b-d, three of e
    n = len(key_row)
    rows = SessionRows(key_row, np.zeros(n, np.int64), np.arange(n, dtype=np.float64),
                       np.arange(n, dtype=np.float64) + 0.5, np.arange(n) + 10, None, np.arange(n) % 2 == 0)
    sessions = GroupSessions(keys, np.arange(5, dtype=np.float64), rows, 1)
    out = _resplit("w", {7: {SESSIONS_STATE: {7: sessions}}}, 128, 4096, SPLITTERS)
    seen = []
    for group, states in out.items():
        entry = states[SESSIONS_STATE][group]
        part = entry.sessions
        for row, j in enumerate(part.slot.tolist()):
            key = entry.keys[j]
            assert key_group_of(key, 4096) == group and entry.fired[j] == keys.index(key)
            seen.append((key, part.start[row], part.count[row], bool(part.changed[row])))
    assert sorted(seen) == sorted((keys[j], float(i), i + 10, i % 2 == 0) for i, j in enumerate(key_row.tolist()))
