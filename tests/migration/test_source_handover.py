"""Source splits handed over in a live rescale: every split read by exactly one subtask in every
epoch, the new readers really read, and the committed output is that of a run without rescales,
through crashes on either side of the rerouting checkpoint (`runtime.splits`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from epochal import (
    CheckpointConfig,
    EpochalError,
    JobState,
    RestartStrategy,
    Source,
    SplitReader,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.connectors import TextFileSource
from epochal.runtime.operators import io
from epochal.state.snapshot_files import decode_operator_state
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink
from epochal.windows import Tumbling

N = 6000
SPLITS = 6
KEYS = 7


class _Split:
    def __init__(self, i: int) -> None:
        self.split_id = f"seq-{i}"
        self.index = i


class _Reader(SplitReader):
    """Numbers i, i + SPLITS, ... below N, ten a read, `pause` seconds apart."""

    def __init__(self, split: _Split, position: int | None, pause: float) -> None:
        self.next = split.index if position is None else position
        self.pause = pause

    def read(self, max_records: int) -> list[int] | None:
        if self.next >= N:
            return None
        time.sleep(self.pause)
        out = list(range(self.next, min(N, self.next + 10 * SPLITS), SPLITS))
        self.next = out[-1] + SPLITS
        return out

    def position(self) -> int:
        return self.next


class Numbers(Source):
    """0..N-1 over SPLITS splits (split i: i, i + SPLITS, ...): a sequence-numbered bounded input."""

    def __init__(self, pause: float = 0.003) -> None:
        self.pause = pause

    def splits(self) -> list[Any]:
        return [_Split(i) for i in range(SPLITS)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _Reader(split, position, self.pause)


def _expected(numbers: range = range(N)) -> Counter[Any]:
    counts: Counter[int] = Counter()
    out: Counter[Any] = Counter()
    for x in numbers:
        counts[x % KEYS] += 1
        out[(x % KEYS, counts[x % KEYS])] += 1
    return out


def _event_time(x: int) -> float:
    return x / 100


def _env(tmp_path: Path, sink: CollectSink, source: Source | None = None, restarts: int = 0,
         all_open: bool = True) -> StreamEnvironment:
    """Parallelism 1 with 2 standby subtasks; `all_open`: on event time, so a subtask reads all
    its splits a batch each in turn, and every split is part-read when a rescale comes."""
    env = StreamEnvironment(parallelism=1, max_workers=3, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c"), retain=1_000),
                            restart=RestartStrategy(max_restarts=restarts, delay=0.0))
    watermarks = WatermarkStrategy.for_monotonous_timestamps(timestamp=_event_time) if all_open else None
    numbers = env.from_source(source or Numbers(), watermarks=watermarks).uid("numbers")
    numbers.key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    return env


def _wait_for(condition: Callable[[], bool], handle: Any) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline and not handle.done(), handle.status()
        time.sleep(0.002)


def _read_some(sink: CollectSink, handle: Any, at_least: int) -> None:
    _wait_for(lambda: handle.status().state is JobState.RUNNING and len(sink.committed()) >= at_least, handle)


def _source_states(tmp_path: Path) -> dict[int, list[Any]]:
    """Checkpoint id -> the source's operator state of each subtask."""
    storage = CheckpointStorage(str(tmp_path / "c"))
    out = {}
    for cid in storage.complete_checkpoints():
        op = storage.resolve(cid).operator("numbers")
        assert op is not None
        out[cid] = [None if st.operator is None else decode_operator_state(storage.read_file(st.operator))
                     for st in sorted(op.subtasks, key=lambda st: st.subtask)]
    return out


def _owners(state: list[Any]) -> dict[str, int]:
    """split id -> the subtask whose state has it; fails if two have it."""
    owners: dict[str, int] = {}
    for subtask, positions in enumerate(state):
        if positions is None:
            continue
        for split_id in set(positions.positions) | positions.finished:
            assert split_id not in owners, f"split {split_id} in subtasks {owners[split_id]} and {subtask}"
            owners[split_id] = subtask
    return owners


def _check_one_owner(tmp_path: Path, readers: Callable[[int], int | None] | None = None) -> dict[int, dict[str, int]]:
    """Every checkpoint: each split in at most one subtask's state, every split read so far in
    one (its position moves on, or it finished); with `readers`, that subtask is i % readers."""
    owners_by_checkpoint = {cid: _owners(state) for cid, state in _source_states(tmp_path).items()}
    for cid, owners in owners_by_checkpoint.items():
        n = readers(cid) if readers is not None else None
        for split_id, subtask in owners.items():
            if n is not None:
                assert int(split_id.split("-")[1]) % n == subtask, f"checkpoint {cid}: {split_id} at {subtask}"
    return owners_by_checkpoint


def _read_by(tmp_path: Path, subtask: int, after: int, before: int | None = None) -> bool:
    """Whether `subtask` moved a split on between checkpoint `after` and a later one (before `before`)."""
    states = _source_states(tmp_path)
    base = states[after]
    start = {k: v for st in base if st is not None for k, v in st.positions.items()}
    for cid, state in states.items():
        if cid <= after or (before is not None and cid >= before) or state[subtask] is None:
            continue
        now = state[subtask]
        if any(v > start.get(k, -1) for k, v in now.positions.items()) or now.finished - (
                base[subtask].finished if base[subtask] is not None else set()):
            return True
    return False


def test_rescale_1_2_1_hands_splits_over_and_commits_every_record_once(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, sink).execute_async("handover-121")
    _read_some(sink, handle, 500)
    up = handle.rescale(2, timeout=30)
    _read_some(sink, handle, len(sink.committed()) + 1500)  # the second subtask reads meanwhile
    down = handle.rescale(1, timeout=30)
    result = handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()
    assert result.restarts == 0 and result.restored_from == (None,)
    assert _read_by(tmp_path, 1, up, down), "after 1 -> 2 the second subtask read nothing"
    _check_one_owner(tmp_path, lambda cid: 1 if cid <= up or cid > down else 2)  # n: the old owners
    final = _source_states(tmp_path)
    last = final[max(final)]
    assert last[0] is not None and last[0].finished == {f"seq-{i}" for i in range(SPLITS)}  # all back on 0


def test_rescale_1_3_2_hands_splits_over_and_commits_every_record_once(tmp_path: Path) -> None:
    sink = CollectSink()
    handle = _env(tmp_path, sink).execute_async("handover-132")
    _read_some(sink, handle, 500)
    up = handle.rescale(3, timeout=30)
    _read_some(sink, handle, len(sink.committed()) + 1000)
    down = handle.rescale(2, timeout=30)
    result = handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected()
    assert result.restarts == 0
    assert _read_by(tmp_path, 2, up, down) and _read_by(tmp_path, 1, up, down)
    _check_one_owner(tmp_path, lambda cid: 1 if cid <= up else 3 if cid <= down else 2)


def test_standby_sources_end_with_the_job_and_not_before_its_data(tmp_path: Path) -> None:
    sink = CollectSink()
    result = _env(tmp_path, sink, Numbers(pause=0.0), all_open=False).execute("no-rescale")  # nothing moves
    assert Counter(sink.committed()) == _expected() and result.restarts == 0
    _check_one_owner(tmp_path, lambda cid: 1)


def _crash_once(monkeypatch: pytest.MonkeyPatch, point: str) -> list[int]:
    """Make the in-process fault point `point` fail its task once (a SIGKILL's in-process twin)."""
    fired: list[int] = []

    def fault_point(name: str) -> None:
        if name == point and not fired:
            fired.append(1)
            raise RuntimeError(f"fault point {name}")

    monkeypatch.setattr(io, "fault_point", fault_point)
    return fired


@pytest.mark.parametrize("point, restored", [("split_handover.given_up", "before"),
                                             ("split_handover.adopting", "after")])
def test_a_crash_around_the_rerouting_checkpoint_restores_the_matching_assignment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, restored: str) -> None:
    fired = _crash_once(monkeypatch, point)
    sink = CollectSink()
    handle = _env(tmp_path, sink, restarts=1).execute_async(f"crash-{restored}")
    _read_some(sink, handle, 500)
    storage = CheckpointStorage(str(tmp_path / "c"))
    try:  # a crash before the new key-group owners took over too abandons the rescale
        handle.rescale(2, timeout=30)
    except EpochalError as exc:
        assert "abandoned" in str(exc)
    result = handle.result(timeout=60)
    assert fired and result.restarts == 1
    assert Counter(sink.committed()) == _expected()
    back_to = result.restored_from[-1]
    assert back_to is not None
    table = storage.resolve(back_to).routing
    assert table is not None and table.active == (1 if restored == "before" else 2)
    readers = table.active
    owners = _check_one_owner(tmp_path)
    for cid, split_owners in owners.items():  # the restored attempt reads as the table it restored
        if cid > back_to:
            assert all(int(s.split("-")[1]) % readers == t for s, t in split_owners.items()), cid
    if restored == "after":
        assert _read_by(tmp_path, 1, back_to)


def test_a_broken_handover_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above fail on a handover that forgets the old owner's positions."""
    monkeypatch.setattr(io.SourceOperator, "adopt", _forgetful_adopt)
    sink = CollectSink()
    handle = _env(tmp_path, sink).execute_async("broken")
    _read_some(sink, handle, 500)
    handle.rescale(2, timeout=30)
    handle.result(timeout=60)
    assert Counter(sink.committed()) != _expected()  # read again from the start: records twice


_adopt = io.SourceOperator.adopt


def _forgetful_adopt(self: io.SourceOperator, states: list[Any]) -> tuple[Any, ...]:
    return _adopt(self, [])


def test_a_watched_directory_gives_new_files_to_the_new_readers(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    lines = iter(range(10_000))

    def write(name: str, count: int) -> list[int]:
        numbers = [next(lines) for _ in range(count)]
        (folder / f".{name}").write_text("".join(f"{x}\n" for x in numbers))
        (folder / f".{name}").rename(folder / name)
        return numbers

    written = write("a-000.txt", 300) + write("a-001.txt", 300)
    sink = CollectSink()
    env = StreamEnvironment(parallelism=1, max_workers=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c"), retain=1_000))
    (env.from_source(TextFileSource(str(folder), watch=0.05)).uid("numbers").map(int)
        .key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink))
    handle = env.execute_async("watched")
    _read_some(sink, handle, len(written))
    at = handle.rescale(2, timeout=30)
    for i in range(2, 6):
        written += write(f"a-{i:03}.txt", 200)
    _read_some(sink, handle, len(written))  # a watched directory never ends: stop once all is in
    handle.cancel()
    with pytest.raises(EpochalError):
        handle.result(timeout=60)
    assert Counter(sink.committed()) == _expected_of(written)
    owners = {cid: own for cid, own in _check_one_owner(tmp_path).items() if cid > at}
    newest = owners[max(owners)]
    assert {s for s, t in newest.items() if t == 1}, newest  # files after the rescale: some on subtask 1
    files = sorted(newest)
    assert all(newest[f] == i % 2 for i, f in enumerate(files)), newest  # log order = name order here


def _expected_of(numbers: list[int]) -> Counter[Any]:
    counts: Counter[int] = Counter()
    out: Counter[Any] = Counter()
    for x in numbers:
        counts[x % KEYS] += 1
        out[(x % KEYS, counts[x % KEYS])] += 1
    return out


class _Events(Numbers):
    """The numbers as events: key x % KEYS, event time x / 100 s, as Arrow batches."""

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        reader = super().open_split(split, position)

        class Reader(type(reader)):  # type: ignore[misc]
            def read(self, max_records: int) -> Any:
                numbers = super().read(max_records)
                if numbers is None:
                    return None
                return pa.RecordBatch.from_pylist([{"k": x % KEYS, "ts": x / 100, "v": x} for x in numbers])

        reader.__class__ = Reader
        return reader


def _windows(tmp_path: Path, steps: tuple[int, ...]) -> Counter[Any]:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=1, max_workers=3, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / f"c{steps}")))
    events = env.from_source(_Events(), watermarks=WatermarkStrategy.bounded_out_of_orderness(0.5, timestamp="ts"))
    events.key_by("k").window(Tumbling(2.0)).count().uid("windows").sink_to(sink)
    handle = env.execute_async(f"windows-{len(steps)}")
    for n in steps:
        _wait_for(lambda: len(sink.committed()) > 0, handle)  # windows fired, others open
        handle.rescale(n, timeout=30)
    assert handle.result(timeout=60).restarts == 0
    rows: list[Any] = []
    for item in sink.committed():
        rows.extend(tuple(r.values()) for r in item.to_pylist()) if isinstance(item, pa.RecordBatch) \
            else rows.append(tuple(item))
    return Counter(rows)


def test_event_time_windows_give_the_same_results_through_handovers(tmp_path: Path) -> None:
    expected = _windows(tmp_path, ())
    assert sum(row[-1] for row in expected) == N
    assert _windows(tmp_path, (2, 1)) == expected
    assert _windows(tmp_path, (3, 2)) == expected
