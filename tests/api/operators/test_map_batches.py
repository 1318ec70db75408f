"""`DataStream.map_batches`: the columnar path, a function of a whole `pyarrow.RecordBatch`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal import JobFailedError, OperatorError
from epochal.connectors import TextFileSource
from epochal.testing import CollectSink, ListSource

if TYPE_CHECKING:
    from api.conftest import MakeEnv


def _capture(seen: list[pa.RecordBatch]) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        seen.append(batch)
        return batch

    return fn


@pytest.mark.parametrize(
    ("items", "names", "rows"),
    [
        ([1, 2, 3], ["value"], [{"value": 1}, {"value": 2}, {"value": 3}]),
        ([("a", 1), ("b", 2)], ["f0", "f1"], [{"f0": "a", "f1": 1}, {"f0": "b", "f1": 2}]),
        ([{"w": "a", "n": 1}, {"w": "b", "n": 2}], ["w", "n"], [{"w": "a", "n": 1}, {"w": "b", "n": 2}]),
    ],
    ids=["scalars", "tuples", "dicts"],
)
def test_python_records_arrive_as_a_record_batch(
    make_env: MakeEnv, items: list[Any], names: list[str], rows: list[dict[str, Any]]
) -> None:
    seen: list[pa.RecordBatch] = []
    env = make_env(parallelism=1)
    env.from_source(ListSource(items)).map_batches(_capture(seen)).sink_to(CollectSink())
    env.execute("map-batches-convert")
    assert seen and all(isinstance(b, pa.RecordBatch) for b in seen)
    assert all(b.schema.names == names for b in seen)
    assert [row for b in seen for row in b.to_pylist()] == rows


def test_vectorized_function_and_per_record_view_downstream(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    sink = CollectSink()
    (
        env.from_source(ListSource(list(range(20)), splits=2, batch_size=6))
        .map_batches(lambda b: pa.RecordBatch.from_arrays([pc.multiply(b.column("value"), 3)], names=["x3"]))
        .sink_to(sink)
    )
    env.execute("map-batches-vectorized")
    assert sorted(sink.committed()) == [3 * i for i in range(20)]


def test_arrow_source_batches_are_handed_over_as_is(make_env: MakeEnv, tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("alpha\nbeta\ngamma\n")
    seen: list[pa.RecordBatch] = []
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(TextFileSource(str(tmp_path))).map_batches(_capture(seen)).map(str.upper).sink_to(sink)
    env.execute("map-batches-text")
    assert [b.schema.names for b in seen] == [["line"]]
    assert sink.committed() == ["ALPHA", "BETA", "GAMMA"]


def test_a_table_result_is_accepted(make_env: MakeEnv) -> None:
    def to_table(batch: pa.RecordBatch) -> pa.Table:
        table = pa.Table.from_batches([batch, batch])  # two chunks
        return table.append_column("double", pc.multiply(table.column("value"), 2))

    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_source(ListSource([1, 2])).map_batches(to_table).sink_to(sink)
    env.execute("map-batches-table")
    assert sink.committed() == [(1, 2), (2, 4), (1, 2), (2, 4)]


def test_none_or_an_empty_result_drops_the_batch(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    none_sink, empty_sink = CollectSink(), CollectSink()
    src = env.from_source(ListSource([1, 2, 3], batch_size=1))
    # batches may reach an operator joined (`Task._coalesce_arrow`): decide on rows, not on batches
    src.map_batches(lambda b: None, name="to_none").sink_to(none_sink, name="none_sink")
    src.map_batches(lambda b: b.filter(pc.greater(b.column("value"), 1))).sink_to(empty_sink)
    result = env.execute("map-batches-drop")
    assert none_sink.committed() == []
    assert result.operator("none_sink").records_in == 0 and result.operator("to_none").records_in == 3
    assert empty_sink.committed() == [2, 3]


def test_multi_column_result_reaches_per_record_operators_as_tuples(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    sink = CollectSink()
    (
        env.from_source(ListSource(["a", "bb", "ccc"]))
        .map_batches(lambda b: b.append_column("len", pc.utf8_length(b.column("value"))))
        .map(lambda row: row)
        .sink_to(sink)
    )
    env.execute("map-batches-tuples")
    assert sink.committed() == [("a", 1), ("bb", 2), ("ccc", 3)]


def test_a_result_of_the_wrong_type_fails_naming_the_operator(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    env.from_source(ListSource([1, 2])).map_batches(lambda b: {"not": "a batch"}, name="to_dict").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("map-batches-wrong-type")
    cause = info.value.cause
    assert isinstance(cause, OperatorError)
    assert cause.operator == "to_dict"
    assert "not a RecordBatch" in str(cause) and "'to_dict'" in str(info.value)


def test_an_exception_in_the_function_names_the_operator_and_rows(make_env: MakeEnv) -> None:
    def boom(batch: pa.RecordBatch) -> NoReturn:
        raise ValueError("vectorized boom")

    env = make_env(parallelism=1)
    env.from_source(ListSource([41, 42])).map_batches(boom, name="boom").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("map-batches-raise")
    cause = info.value.cause
    assert isinstance(cause, OperatorError) and cause.operator == "boom"
    assert isinstance(cause.cause, ValueError)
    assert "41" in str(cause) and "vectorized boom" in str(cause)


def test_records_arrow_cannot_convert_fail_naming_the_operator(make_env: MakeEnv) -> None:
    env = make_env(parallelism=1)
    env.from_source(ListSource([1, "two"])).map_batches(lambda b: b, name="columnar").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("map-batches-mixed")
    cause = info.value.cause
    assert isinstance(cause, OperatorError)
    assert cause.operator == "columnar"


def _run_identity(make_env: MakeEnv, items: list[Any]) -> tuple[list[Any], JobFailedError | None]:
    """Runs `items` through an identity map_batches: returns (rows seen, failure or None)."""
    seen: list[pa.RecordBatch] = []
    env = make_env(parallelism=1)
    env.from_source(ListSource(items)).map_batches(_capture(seen), name="identity").sink_to(CollectSink())
    try:
        env.execute("map-batches-identity")
    except JobFailedError as exc:
        return seen, exc
    return [row for b in seen for row in b.to_pylist()], None


def test_tuples_of_different_lengths_are_not_silently_truncated(make_env: MakeEnv) -> None:
    rows, failure = _run_identity(make_env, [(1, 2), (3,)])
    assert rows == [] and failure is not None, "the batch was converted"  # refused, naming the operator
    assert isinstance(failure.cause, OperatorError) and failure.cause.operator == "identity"
    assert "tuples of different lengths: (1, 2) and (3,)" in str(failure)


def test_dict_keys_missing_from_the_first_record_are_not_silently_dropped(make_env: MakeEnv) -> None:
    rows, failure = _run_identity(make_env, [{"a": 1}, {"a": 2, "b": 3}])
    assert failure is None
    assert rows == [{"a": 1, "b": None}, {"a": 2, "b": 3}]  # every key a column, missing values null
