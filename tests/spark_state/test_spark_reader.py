"""Reading a job's keyed state from Spark with the `epochal-state` data source, from a classic
session and from a Spark Connect client."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import pytest

from epochal import CheckpointConfig, KeyedProcessFunction, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.state.reader import read_state
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource

pytestmark = pytest.mark.spark


class Tags(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.tags = ctx.map_state("tags")

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        self.tags.put(value[1] % 3, (value[1], "x"))
        return ()


def _job(directory: str, items: list[Any], backend: Literal["memory", "disk"] = "memory") -> None:
    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=0.005, directory=directory, retain=10_000),  # keep them all
        executor="inprocess",
        restart=RestartStrategy.none(),
        state_backend=backend,
    )
    keyed = env.from_source(ListSource(items, splits=2, batch_size=10), name="src").key_by(lambda r: r[0])
    keyed.count().uid("counts").sink_to(CollectSink(), name="out")
    keyed.process(Tags()).uid("tags").sink_to(CollectSink(), name="tags-out")
    # a virtual clock: checkpoints come at fixed points of the run, the first long before its end
    InProcessExecutor(seed=0, virtual_time=True).execute(env.job_graph("spark-state"))


def _counts(rows: list[Any]) -> dict[Any, int]:
    return {pickle.loads(r.key_pickle): pickle.loads(r.value_pickle) for r in rows}


def test_state_of_the_latest_and_of_a_given_checkpoint(any_spark: Any, tmp_path: Path) -> None:
    import epochal.spark

    epochal.spark.register(any_spark)
    directory = str(tmp_path / "ckpt")
    items = [(f"k{i % 11}", i) for i in range(220)] + [((1, "t"), 5)]
    _job(directory, items, backend="disk")
    df = any_spark.read.format("epochal-state").option("operator", "counts").load(directory)
    assert df.columns == [
        "key_group", "key", "state", "value", "key_json", "value_json", "key_pickle", "value_pickle"
    ]
    rows = df.collect()
    counts = _counts(rows)
    expected: dict[Any, int] = {f"k{k}": 20 for k in range(11)}
    assert counts == {**expected, (1, "t"): 1}
    # str keys and a tuple key have no common Spark type: `key` is their JSON text; the counts are bigints
    assert dict(df.dtypes)["key"] == "string" and dict(df.dtypes)["value"] == "bigint"
    assert {json.loads(r.key) if r.key.startswith('"') else r.key for r in rows} >= {"k0", "k10"}
    assert {r.state for r in rows} == {"count"}
    assert any_spark.read.format("epochal-state").option("operator", "counts").load(directory).where(
        "key = '\"k3\"'"
    ).collect()[0].value == 20

    tags = any_spark.read.format("epochal-state").option("operator", "tags").load(directory).collect()
    assert {pickle.loads(r.key_pickle) for r in tags} == set(counts)
    assert all(r.state == "tags" for r in tags)

    # an older complete checkpoint holds less (time travel by id), exactly what it holds
    first = CheckpointStorage(directory).complete_checkpoints()[0]
    then = {row.key: row.value for row in read_state(directory, "counts", checkpoint=first)}
    assert sum(then.values()) < len(items), "the first checkpoint came after the whole input"
    older = any_spark.read.format("epochal-state").option("operator", "counts").option("checkpoint", first)
    older = older.load(directory)
    assert _counts(older.collect()) == then


def test_an_unknown_operator_names_the_known_ones(any_spark: Any, tmp_path: Path) -> None:
    import epochal.spark

    epochal.spark.register(any_spark)
    directory = str(tmp_path / "ckpt")
    _job(directory, [("a", 1)])
    with pytest.raises(Exception, match="counts"):  # Spark wraps the error in its own type
        any_spark.read.format("epochal-state").option("operator", "nope").load(directory).collect()


def test_a_relative_path_that_is_not_there_says_where_it_was_resolved(any_spark: Any) -> None:
    """Spark resolves `load()`'s path in the process that plans the read (under Connect, a
    directory of the session's on the server), not in the caller's directory."""
    import epochal.spark

    epochal.spark.register(any_spark)
    with pytest.raises(Exception, match="relative path 'no-such-ckpt'.*give an absolute path or a URI"):
        any_spark.read.format("epochal-state").option("operator", "counts").load("no-such-ckpt").collect()


def test_keys_and_values_come_as_spark_types(any_spark: Any, tmp_path: Path) -> None:
    """A str key is a Spark string (`WHERE key = 'k3'`), a count a bigint, a tuple a struct."""
    import epochal.spark

    epochal.spark.register(any_spark)
    directory = str(tmp_path / "ckpt")
    _job(directory, [(f"k{i % 5}", i) for i in range(50)])
    df = any_spark.read.format("epochal-state").option("operator", "counts").load(directory)
    assert dict(df.dtypes)["key"] == "string" and dict(df.dtypes)["value"] == "bigint"
    assert df.where("key = 'k3'").collect()[0].value == 10
    assert df.where("key_json = '\"k3\"'").count() == 1
    tags = any_spark.read.format("epochal-state").option("operator", "tags").load(directory)
    # MapState "tags": int -> (int, "x"), a map of structs
    assert dict(tags.dtypes)["value"] == "map<bigint,struct<_1:bigint,_2:string>>"
    for row in tags.collect():
        assert {k: tuple(v) for k, v in row.value.items()} == pickle.loads(row.value_pickle)
