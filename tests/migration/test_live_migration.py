"""Key groups moved between running subtasks: every update committed once, nothing restarted."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from tests.api.test_rescale_and_savepoint import N, SlowSequence, _expected

from epochal import (
    CheckpointConfig,
    EpochalError,
    JobState,
    RestartStrategy,
    StateConfig,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.state.reader import read_state
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink
from epochal.windows import Session, Tumbling

KEYS = 7


def _env(tmp_path: Path, sink: CollectSink, parallelism: int = 2, backend: str = "memory") -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess", state=StateConfig(backend=backend),
                            checkpoint=CheckpointConfig(interval=0.2, directory=str(tmp_path / "c")))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    return env


def _wait_running(handle: Any) -> None:
    deadline = time.monotonic() + 30
    while handle.status().state is not JobState.RUNNING:
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.005)


def _groups_of_keys() -> list[int]:
    return sorted({key_group_of(k) for k in range(KEYS)})


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_moving_every_used_key_group_back_and_forth_commits_every_update_once(tmp_path: Path, backend: str) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, sink, backend=backend).execute_async("moved")
    _wait_running(handle)
    groups = _groups_of_keys()
    contiguous = RoutingTable.contiguous(2, 128)
    there = {g: 1 - contiguous.owners[g] for g in groups}  # every used group to the other subtask
    first = handle.move_key_groups(there, timeout=30)
    back = {g: contiguous.owners[g] for g in groups}
    second = handle.move_key_groups(back, timeout=30)
    assert second > first
    result = handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()  # nothing lost, nothing twice
    assert result.restarts == 0 and result.restored_from == (None,)
    manifest = CheckpointStorage(str(tmp_path / "c")).resolve("latest")
    assert manifest.routing == RoutingTable(contiguous.owners, 2, version=2)  # moved, and moved back


def test_a_move_that_moves_nothing_is_refused_and_the_job_runs_on(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, sink).execute_async("refused")
    _wait_running(handle)
    with pytest.raises(ValueError, match="moves nothing|leave every key group"):
        handle.move_key_groups({0: 0}, timeout=30)
    with pytest.raises(ValueError, match="out of range"):
        handle.move_key_groups({0: 5}, timeout=30)
    handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()


def test_moving_needs_a_checkpoint_directory() -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().sink_to(CollectSink())
    handle = env.execute_async("no-directory")
    _wait_running(handle)
    with pytest.raises(EpochalError, match="needs CheckpointConfig"):
        handle.move_key_groups({0: 1}, timeout=30)
    handle.result(timeout=60)


def test_in_every_checkpoint_each_key_group_has_exactly_one_owner(tmp_path: Path) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c"), retain=1_000))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    handle = env.execute_async("owners")
    _wait_running(handle)
    contiguous = RoutingTable.contiguous(2, 128)
    groups = _groups_of_keys()
    # one way: subtask 0 only loses, subtask 1 only gains
    handle.move_key_groups({g: 1 for g in groups if contiguous.owners[g] == 0}, timeout=30)
    time.sleep(0.3)  # checkpoints after the move: the old owner's must not hold the groups any more
    handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()
    storage = CheckpointStorage(str(tmp_path / "c"))
    ids = storage.complete_checkpoints()
    assert len(ids) > 3
    for cid in ids:
        op = storage.resolve(cid).operator("count")
        assert op is not None
        held = sorted(g for st in op.subtasks for g in st.holds())
        assert held == list(range(128)), f"checkpoint {cid}"


class _Events(SlowSequence):
    """`SlowSequence`'s numbers as events: key i % KEYS, event time i / 100 s (with `pauses`,
    10 s more after every `pauses` numbers: sessions end there), as dicts or as Arrow batches;
    with `crash`, the reader fails once (a marker file says it did) at that number."""

    def __init__(self, arrow: bool, pauses: int = 0, crash: tuple[int, Path] | None = None) -> None:
        super().__init__()
        self.arrow, self.pauses, self.crash = arrow, pauses, crash

    def open_split(self, split: Any, position: Any | None) -> Any:
        reader, arrow, pauses, crash = super().open_split(split, position), self.arrow, self.pauses, self.crash

        class Reader(type(reader)):  # type: ignore[misc]
            def read(self, max_records: int) -> Any:
                numbers = super().read(max_records)
                if numbers is None:
                    return None
                if crash is not None and crash[0] in numbers and not crash[1].exists():
                    crash[1].touch()
                    raise RuntimeError(f"failing once at {crash[0]}")
                rows = [{"k": x % KEYS, "ts": x / 100 + (10 * (x // pauses) if pauses else 0), "v": x}
                        for x in numbers]
                return pa.RecordBatch.from_pylist(rows) if arrow else rows

        reader.__class__ = Reader
        return reader


def _windowed_counts(tmp_path: Path, arrow: bool, move: bool, window: Any = None, crash: int | None = None,
                     pauses: int = 0) -> Counter[Any]:
    sink = CollectSink()
    name = f"{arrow}-{move}-{crash}"
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / f"c{name}")),
                            restart=RestartStrategy(max_restarts=1 if crash is not None else 0))
    source = _Events(arrow, pauses, None if crash is None else (crash, tmp_path / f"crashed-{name}"))
    events = env.from_source(source, watermarks=WatermarkStrategy.bounded_out_of_orderness(0.5, timestamp="ts"))
    events.key_by("k").window(window or Tumbling(2.0)).count().uid("windows").sink_to(sink)
    handle = env.execute_async(f"windows-{name}")
    _wait_running(handle)
    if move:  # once windows have fired: others are open, with their timers, when their groups move
        deadline = time.monotonic() + 30
        while not sink.committed():
            assert time.monotonic() < deadline
            time.sleep(0.002)
        contiguous = RoutingTable.contiguous(2, 128)
        groups = _groups_of_keys()
        handle.move_key_groups({g: 1 - contiguous.owners[g] for g in groups}, timeout=30)  # a swap
        handle.move_key_groups(dict.fromkeys(groups, 0), timeout=30)  # then all on subtask 0
    assert handle.result(timeout=60).restarts == (crash is not None)  # moved live: nothing failed and restored
    rows: list[Any] = []
    for item in sink.committed():
        rows.extend(tuple(r.values()) for r in item.to_pylist()) if isinstance(item, pa.RecordBatch) \
            else rows.append(tuple(item))
    return Counter(rows)


@pytest.mark.parametrize("arrow", [False, True])
def test_event_time_windows_and_their_timers_move_with_their_key_groups(tmp_path: Path, arrow: bool) -> None:
    expected = _windowed_counts(tmp_path, arrow, move=False)
    assert sum(n for (_, _, _, n), times in expected.items()) == N  # every event in one window, once
    assert _windowed_counts(tmp_path, arrow, move=True) == expected


def test_session_windows_move_and_restore_with_their_key_groups(tmp_path: Path) -> None:
    """Sessions on Arrow batches live in a session table (`GroupSessions` per key group): moved
    live, or restored after a failure, they end as on the per-key path's stores, unmoved."""
    window = Session(gap=1.0)
    expected = _windowed_counts(tmp_path, False, move=False, window=window, pauses=1_000)  # per-key stores
    assert sum(n for (_, _, _, n) in expected.elements()) == N and len(expected) == KEYS * N // 1_000
    assert _windowed_counts(tmp_path, True, move=False, window=window, pauses=1_000) == expected
    assert _windowed_counts(tmp_path, True, move=True, window=window, pauses=1_000) == expected
    assert _windowed_counts(tmp_path, True, move=False, window=window, pauses=1_000, crash=N - 700) == expected


def test_a_rescale_into_standby_subtasks_is_a_live_move_no_restart(tmp_path: Path) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=1, max_workers=3, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "c")))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    handle = env.execute_async("standby")
    _wait_running(handle)
    assert handle.status().parallelism == 1
    handle.rescale(3, timeout=30)
    assert handle.status().parallelism == 3
    table = CheckpointStorage(str(tmp_path / "c")).resolve("latest").routing
    assert table is not None and sorted(set(table.owners)) == [0, 1, 2]  # every subtask owns groups
    handle.rescale(2, timeout=30)
    assert handle.status().parallelism == 2
    result = handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()
    assert result.restarts == 0 and result.restored_from == (None,)  # one attempt: nothing restarted
    final = CheckpointStorage(str(tmp_path / "c")).resolve("latest").routing
    assert final is not None and final.active == 2 and final.parallelism == 3


class _CrashOnce:
    """Fails once on record `at`: a restore after the moves, from an incremental checkpoint."""

    def __init__(self, at: int, marker: Path) -> None:
        self.at, self.marker = at, str(marker)

    def __call__(self, x: int) -> int:
        if x == self.at and not Path(self.marker).exists():
            Path(self.marker).touch()
            raise RuntimeError(f"failing once at {x}")
        return x


class _Slower(SlowSequence):
    """`SlowSequence`, three times slower: the moves happen half-way."""

    def open_split(self, split: Any, position: Any | None) -> Any:
        reader = super().open_split(split, position)

        class Reader(type(reader)):  # type: ignore[misc]
            def read(self, max_records: int) -> Any:
                time.sleep(0.002)
                return super().read(max_records)

        reader.__class__ = Reader
        return reader


def _cold_then_hot(x: int) -> int:
    """Keys 0-2999 get one record each, in the first half; then 50 hot keys."""
    return x if x < N // 2 else N // 2 + x % 50


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_checkpoints_stay_incremental_through_moves_and_restore_exactly(tmp_path: Path, backend: str) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess", state=StateConfig(backend=backend),
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c"), retain=1_000),
                            restart=RestartStrategy(max_restarts=1))
    (env.from_source(_Slower()).map(_CrashOnce(N - 200, tmp_path / "crashed"))
        .key_by(_cold_then_hot).count().uid("count").sink_to(sink))
    handle = env.execute_async("incremental")
    deadline = time.monotonic() + 30
    while len(sink.committed()) < N // 2:  # the cold keys are in, and stay as they are
        assert time.monotonic() < deadline and not handle.done()
        time.sleep(0.005)
    contiguous = RoutingTable.contiguous(2, 128)
    groups = range(0, 128, 3)
    first = handle.move_key_groups({g: 1 - contiguous.owners[g] for g in groups}, timeout=30)  # a swap
    handle.move_key_groups(dict.fromkeys(groups, 0), timeout=30)  # one way: some go back, some stay
    result = handle.result(timeout=60)
    assert result.restarts == 1 and result.restored_from[-1] is not None and result.restored_from[-1] > first
    keys = [_cold_then_hot(x) for x in range(N)]
    expected = Counter((k, n) for k, c in Counter(keys).items() for n in range(1, c + 1))
    # restored from deltas written after the moves: the cold keys that moved are in them
    assert Counter(sink.committed()) == expected
    final = {row.key: row.value for row in read_state(str(tmp_path / "c"), "count")}
    assert final == Counter(keys)  # every key's count, read through the chains the moves left
    storage = CheckpointStorage(str(tmp_path / "c"))
    deltas = [cid for cid in storage.complete_checkpoints() if cid > first
              and any(st.keyed_base for op in storage.resolve(cid).operators for st in op.subtasks)]
    assert deltas, "no incremental checkpoint after the moves: the chains were cut"


@pytest.mark.parametrize("window", [Tumbling(20.0), Session(gap=20.0)], ids=["slices", "sessions"])
def test_a_read_committed_query_finds_a_keys_windows_in_a_table(tmp_path: Path, window: Any) -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    events = env.from_source(_Events(arrow=True),
                             watermarks=WatermarkStrategy.bounded_out_of_orderness(0.5, timestamp="ts"))
    events.key_by("k").window(window).count().uid("windows").sink_to(CollectSink())
    handle = env.execute_async("committed-windows")
    deadline = time.monotonic() + 30
    while (handle.status().last_checkpoint or 0) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    found = handle.query_state("windows", 3)  # read-committed: from the last complete checkpoint
    live = handle.query_state("windows", 3, live=True)  # the running subtask's table
    handle.result(timeout=60)
    assert "__window_table__" not in found and "__window_sessions__" not in found  # a group's, not the key's
    for store in (found["__window__"], live["__window__"]):
        if isinstance(window, Session):  # the key's open session, counted so far
            assert len(store.sessions[0].starts) == 1 and store.sessions[0].partials[0] > 0
        else:  # the key's open window, counted so far
            assert store.starts and sum(store.partials.values()) > 0


def test_columnar_aggregates_move_with_their_key_groups_and_commit_once(tmp_path: Path) -> None:
    """A sum on Arrow batches with a local phase: its table moves, as `GroupTable` entries, with
    the key groups, and the committed sums end at every key's total."""
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    (env.from_source(_Events(arrow=True)).key_by("k").sum("v", emit="on_checkpoint").uid("sums").sink_to(sink))
    handle = env.execute_async("columnar-moved")
    _wait_running(handle)
    contiguous = RoutingTable.contiguous(2, 128)
    groups = _groups_of_keys()
    handle.move_key_groups({g: 1 - contiguous.owners[g] for g in groups}, timeout=30)
    handle.move_key_groups({g: contiguous.owners[g] for g in groups}, timeout=30)
    result = handle.result(timeout=60)
    assert result.restarts == 0
    totals: Counter[int] = Counter()
    for x in range(N):
        totals[x % KEYS] += x
    last: dict[int, int] = {}
    seen: Counter[tuple[int, int]] = Counter()
    for key, value in sink.committed():
        last[key] = value
        seen[(key, value)] += 1
    assert last == dict(totals)
    assert max(seen.values()) == 1  # each key's sum committed at most once per value: no epoch twice
    assert {r.key: r.value for r in read_state(str(tmp_path / "c"), "sums")} == dict(totals)
