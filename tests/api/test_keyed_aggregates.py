"""Keyed aggregates (count, sum, min, max, mean, aggregate functions), local-global aggregation and
columnar state per key group: the same results on records and on Arrow batches, with and without
a local phase, exactly once across failures, and restorable at another parallelism."""

from __future__ import annotations

import collections
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from epochal import (
    AggregateFunction,
    BatchAggregateFunction,
    CheckpointConfig,
    GraphError,
    JobFailedError,
    RestartStrategy,
    Sink,
    SinkWriter,
    StreamEnvironment,
)
from epochal.plan.aggregates import LocalAggregateSpec
from epochal.state.reader import read_state
from epochal.testing import CollectSink, Crash, ListSource

ITEMS = [{"k": f"k{(i * 7) % 13}", "v": (i * 37) % 101 - 50} for i in range(2_000)]


def _env(tmp_path: Path, parallelism: int = 2, interval: float = 0.01, **kwargs: Any) -> StreamEnvironment:
    return StreamEnvironment(parallelism=parallelism, executor="inprocess", batch_size=64,
                             checkpoint=CheckpointConfig(interval=interval, directory=str(tmp_path / "ckpt")),
                             **kwargs)


def _expected(kind: str, items: list[dict[str, Any]] = ITEMS) -> dict[str, Any]:
    values: dict[str, list[int]] = collections.defaultdict(list)
    for item in items:
        values[item["k"]].append(item["v"])
    fn = {"sum": sum, "min": min, "max": max, "mean": statistics.fmean, "count": len}[kind]
    return {k: fn(v) for k, v in values.items()}


def _rows(committed: list[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in committed]


class _Kinds(SinkWriter):
    kinds: list[str] = []

    def write(self, batch: Any) -> None:
        self.kinds.append(type(batch).__name__)


class KindsSink(Sink):
    """Remembers whether batches came as Arrow or as records."""

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _Kinds()


@pytest.mark.parametrize("columnar", [False, True])
def test_arrow_in_arrow_out_records_in_records_out(tmp_path: Path, columnar: bool) -> None:
    _Kinds.kinds = []
    env = _env(tmp_path)
    stream = env.from_source(ListSource(ITEMS, splits=3))
    keyed = stream.map_batches(lambda b: b).key_by("k") if columnar else stream.key_by(lambda r: r["k"])
    keyed.sum("v" if columnar else (lambda r: r["v"]), emit="on_checkpoint").sink_to(KindsSink())
    env.execute("kinds")
    assert set(_Kinds.kinds) == {"RecordBatch" if columnar else "list"}


def _last(rows: list[tuple[Any, ...]]) -> dict[Any, Any]:
    return {row[0]: row[1] for row in rows}


def _job(env: StreamEnvironment, kind: str, columnar: bool, emit: str, combine: bool | None = None,
         items: list[Any] = ITEMS) -> CollectSink:
    sink = CollectSink()
    stream = env.from_source(ListSource(items, splits=3))
    if columnar:
        keyed = stream.map_batches(lambda b: b).key_by("k")
    else:
        keyed = stream.key_by(lambda r: r["k"])
    method = getattr(keyed, kind)
    args = () if kind == "count" else ("v",) if columnar else (lambda r: r["v"],)
    method(*args, emit=emit, combine=combine).uid("agg").sink_to(sink)
    return sink


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize("kind", ["count", "sum", "min", "max", "mean"])
def test_each_aggregate_emits_its_newest_value_per_epoch_on_both_paths(tmp_path: Path, kind: str,
                                                                        columnar: bool) -> None:
    env = _env(tmp_path)
    sink = _job(env, kind, columnar, "on_checkpoint")
    assert any(isinstance(s, LocalAggregateSpec) for v in env.job_graph("j").vertices for s in v.chain)
    env.execute("agg")
    got = _last(_rows(sink.committed()))
    assert got == pytest.approx(_expected(kind))


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize("kind", ["count", "sum", "min", "max", "mean"])
def test_per_record_updates_are_the_running_values_whatever_the_path(tmp_path: Path, kind: str,
                                                                      columnar: bool) -> None:
    items = ITEMS[:300]
    env = _env(tmp_path, parallelism=1)
    sink = _job(env, kind, columnar, "per_record", items=items)
    env.execute("agg")
    running: dict[str, list[int]] = collections.defaultdict(list)
    expected = []
    for item in items:
        running[item["k"]].append(item["v"])
        fn = {"sum": sum, "min": min, "max": max, "mean": statistics.fmean, "count": len}[kind]
        expected.append((item["k"], fn(running[item["k"]])))
    got = sorted(_rows(sink.committed()))
    assert [k for k, _ in got] == [k for k, _ in sorted(expected)]
    assert [v for _, v in got] == pytest.approx([v for _, v in sorted(expected)])


@pytest.mark.parametrize("columnar", [False, True])
def test_a_local_phase_changes_nothing_committed_per_epoch(tmp_path: Path, columnar: bool) -> None:
    finals = []
    for combine in (False, True):
        env = _env(tmp_path / str(combine))
        sink = _job(env, "sum", columnar, "on_checkpoint", combine=combine)
        has_local = any(isinstance(s, LocalAggregateSpec) for v in env.job_graph("j").vertices for s in v.chain)
        assert has_local == combine
        result = env.execute("agg")
        finals.append(_last(_rows(sink.committed())))
        names = {op.name for op in result.operators}
        if combine:  # the local phase saw every record; the global one far fewer rows
            assert result.operator("sum-local").records_in == len(ITEMS)
            assert result.operator("sum").records_in < len(ITEMS)
        else:
            assert "sum-local" not in names
    assert finals[0] == finals[1] == _expected("sum")


@pytest.mark.parametrize("columnar", [False, True])
def test_a_crash_replays_and_commits_each_epoch_once(tmp_path: Path, columnar: bool) -> None:
    items: list[Any] = list(ITEMS)
    items.insert(1_500, Crash())
    env = _env(tmp_path, restart=RestartStrategy(max_restarts=3))
    sink = _job(env, "sum", columnar, "on_checkpoint", items=items)
    result = env.execute("agg-crash")
    assert result.restarts == 1
    updates = _rows(sink.committed())
    assert _last(updates) == _expected("sum")
    per_key = collections.Counter(k for k, _ in updates)
    assert max(per_key.values()) <= len(result.checkpoints) + 1  # at most one update per key and epoch
    stored = {r.key: r.value for r in read_state(str(tmp_path / "ckpt"), "agg")}
    assert stored == _expected("sum")


def test_columnar_state_restores_at_other_parallelisms(tmp_path: Path) -> None:
    directory = str(tmp_path / "ckpt")
    sums: collections.Counter[str] = collections.Counter()
    for run, parallelism in enumerate([2, 3, 1], start=1):
        items = [{"k": f"key-{(i * 7 + run) % 40}", "v": i % 9} for i in range(500)]
        for item in items:
            sums[item["k"]] += item["v"]
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess", batch_size=7,
                                checkpoint=CheckpointConfig(interval=0.002, directory=directory, retain=2),
                                restart=RestartStrategy.none())
        sink = CollectSink()
        (env.from_source(ListSource(items, splits=3), name=f"src-{run}").map_batches(lambda b: b)
            .key_by("k").sum("v", emit="on_checkpoint").uid("sums").sink_to(sink, name=f"out-{run}"))
        env.execute(f"run-{run}", from_checkpoint=None if run == 1 else "latest", allow_non_restored_state=True)
        assert {r.key: r.value for r in read_state(directory, "sums")} == dict(sums), f"run {run}"
        assert _last(_rows(sink.committed())).items() <= dict(sums).items()


class Average(AggregateFunction[float, tuple[float, int], float]):
    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add(self, value: float, acc: tuple[float, int]) -> tuple[float, int]:
        return (acc[0] + value, acc[1] + 1)

    def merge(self, a: tuple[float, int], b: tuple[float, int]) -> tuple[float, int]:
        return (a[0] + b[0], a[1] + b[1])

    def get_result(self, acc: tuple[float, int]) -> float:
        return acc[0] / acc[1]


class SumOfSquares(BatchAggregateFunction):
    accumulators = {"squares": np.add}

    def add_batch(self, batch: pa.RecordBatch, codes: np.ndarray, groups: int) -> dict[str, np.ndarray]:
        v = batch.column("v").to_numpy().astype(np.int64)
        out = np.zeros(groups, dtype=np.int64)
        np.add.at(out, codes, v * v)
        return {"squares": out}

    def result(self, acc: dict[str, np.ndarray]) -> np.ndarray:
        return acc["squares"]


@pytest.mark.parametrize("columnar", [False, True])
def test_aggregate_functions_with_merge_and_on_batches(tmp_path: Path, columnar: bool) -> None:
    env = _env(tmp_path)
    averages, squares = CollectSink(), CollectSink()
    stream = env.from_source(ListSource(ITEMS, splits=3))
    keyed = stream.map_batches(lambda b: b).key_by("k") if columnar else stream.key_by(lambda r: r["k"])
    values = keyed if columnar else stream.map(lambda r: r).key_by(lambda r: r["k"])
    (values.map(lambda r: r["v"] if isinstance(r, dict) else r[1]).key_by(lambda v: v % 3)
        .aggregate(Average(), emit="on_checkpoint").sink_to(averages))
    keyed.aggregate(SumOfSquares(), emit="on_checkpoint").uid("squares").sink_to(squares)
    env.execute("functions")
    by_mod: dict[int, list[int]] = collections.defaultdict(list)
    for item in ITEMS:
        by_mod[item["v"] % 3].append(item["v"])
    assert _last(_rows(averages.committed())) == pytest.approx({m: statistics.fmean(v) for m, v in by_mod.items()})
    expected = collections.Counter()
    for item in ITEMS:
        expected[item["k"]] += item["v"] ** 2
    assert _last(_rows(squares.committed())) == dict(expected)
    assert {r.key: r.value for r in read_state(str(tmp_path / "ckpt"), "squares")} == dict(expected)


def test_an_aggregate_function_without_merge_cannot_combine(tmp_path: Path) -> None:
    class NoMerge(AggregateFunction[int, int, int]):
        def create_accumulator(self) -> int:
            return 0

        def add(self, value: int, acc: int) -> int:
            return acc + value

        def get_result(self, acc: int) -> int:
            return acc

    keyed = _env(tmp_path).from_source(ListSource([1, 2, 3])).key_by(lambda v: v % 2)
    with pytest.raises(GraphError, match="merge"):
        keyed.aggregate(NoMerge(), combine=True)
    with pytest.raises(GraphError, match="merge"):
        keyed.aggregate(NoMerge(), emit="on_checkpoint")


def test_a_reduce_combines_only_when_asked(tmp_path: Path) -> None:
    pairs = [(f"k{i % 11}", i) for i in range(3_000)]
    for combine in (False, True):
        env = _env(tmp_path / str(combine))
        sink = CollectSink()
        (env.from_source(ListSource(pairs, splits=2)).key_by(lambda p: p[0])
            .reduce(lambda a, b: (a[0], a[1] + b[1]), emit="on_checkpoint", combine=combine).sink_to(sink))
        vertices = env.job_graph("j").vertices
        assert any(isinstance(s, LocalAggregateSpec) for v in vertices for s in v.chain) == combine
        env.execute("reduce")
        sums: collections.Counter[str] = collections.Counter()
        for key, value in pairs:
            sums[key] += value
        assert _last([tuple(r) for r in sink.committed()]) == dict(sums)


def test_a_missing_value_on_the_columnar_path_names_the_operator(tmp_path: Path) -> None:
    items = [{"k": "a", "v": 1}, {"k": "a", "v": None}]
    env = _env(tmp_path, restart=RestartStrategy.none())
    env.from_source(ListSource(items)).map_batches(lambda b: b).key_by("k").sum("v").sink_to(CollectSink())
    with pytest.raises(JobFailedError, match="'sum'"):
        env.execute("nulls")


def test_bad_records_are_skipped_by_policy(tmp_path: Path) -> None:
    items = [("a", 1), ("a", "x"), ("b", 2), ("a", 3)]
    env = _env(tmp_path, parallelism=1)
    sink = CollectSink()
    (env.from_source(ListSource(items)).key_by(lambda r: r[0])
        .sum(lambda r: r[1], on_error="skip").sink_to(sink))
    result = env.execute("skip")
    assert sorted(sink.committed()) == [("a", 1), ("a", 4), ("b", 2)]
    assert result.operator("sum").skipped_records == 1
