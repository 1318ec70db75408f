"""The API of two inputs and side outputs: what it builds (plain data in the job graph), what it
refuses before a job starts, and the small behaviours the reference tests do not name: co-map,
non-keyed co-process and broadcast functions, side outputs beside dead letters, a semi join's
output, Arrow inputs."""

from __future__ import annotations

import collections
from typing import Any

import pyarrow as pa
import pytest

from epochal import (
    BroadcastProcessFunction,
    CoProcessFunction,
    GraphError,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapStateDescriptor,
    OutputTag,
    Sink,
    SinkWriter,
    Source,
    SplitReader,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.connectors import FileSink, read_committed
from epochal.plan.specs import SideOutputSpec
from epochal.plan.two_inputs import KeyedCoProcessSpec, TwoInputSpec
from epochal.testing import CollectSink, ListSource
from epochal.windows import Tumbling

ON_TIME = WatermarkStrategy.for_monotonous_timestamps(timestamp="t")


def _env(parallelism: int = 2, **kw: Any) -> StreamEnvironment:
    return StreamEnvironment(parallelism=parallelism, executor="inprocess", **kw)


class Both(KeyedCoProcessFunction):
    def process_element1(self, value: Any, ctx: Any) -> Any:
        return [("a", value)]

    def process_element2(self, value: Any, ctx: Any) -> Any:
        return [("b", value)]


# -- the plan -------------------------------------------------------------------------------------

def test_a_two_input_operator_heads_its_vertex_and_its_edges_name_their_input() -> None:
    env = _env()
    a, b = env.from_source(ListSource([1]), name="a"), env.from_source(ListSource([2]), name="b")
    a.key_by(lambda x: x).connect(b.key_by(lambda x: x)).process(Both(), name="both").map(str).sink_to(CollectSink())
    job = env.job_graph("plan")
    (vertex,) = [v for v in job.vertices if isinstance(v.chain[0], TwoInputSpec)]
    assert isinstance(vertex.chain[0], KeyedCoProcessSpec)
    assert [op.name for op in vertex.chain] == ["both", "map", "sink"]
    inputs = sorted((job.vertex(e.source).name, e.input) for e in job.inputs_of(vertex.id))
    assert inputs == [("a", 0), ("b", 1)]
    assert vertex.id in job.keyed_vertices()


def test_a_side_output_adds_a_main_split_only_where_one_is_read() -> None:
    tag = OutputTag("odd")
    env = _env()
    out = env.from_source(ListSource([1])).key_by(lambda x: x).process(_Odd(tag), name="p")
    out.map(str).sink_to(CollectSink())
    plain = [op for v in env.job_graph("no-side").vertices for op in v.chain]
    assert not any(isinstance(op, SideOutputSpec) for op in plain)
    out.side_output(tag).sink_to(CollectSink())
    job = env.job_graph("side")
    chains = {v.chain[0].name: v.chain for v in job.vertices}
    assert chains["p"][0].side_outputs == ("odd",)  # type: ignore[attr-defined]
    splits = sorted((v.chain[0].tag or "", [type(op).__name__ for op in v.chain])  # type: ignore[attr-defined]
                    for v in job.vertices if isinstance(v.chain[0], SideOutputSpec))
    assert splits == [("", ["SideOutputSpec", "RecordFnSpec", "SinkSpec"]), ("odd", ["SideOutputSpec", "SinkSpec"])]


class _Odd(KeyedProcessFunction):
    def __init__(self, tag: OutputTag) -> None:
        self.tag = tag

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value % 2:
            ctx.output(self.tag, value)
            return None
        return [value]


# -- what is refused before the job starts ----------------------------------------------------------

def test_mistakes_are_refused_while_the_program_is_built() -> None:
    env = _env()
    a, b = env.from_source(ListSource([1])), env.from_source(ListSource([2]))
    with pytest.raises(GraphError, match="needs both inputs keyed"):
        a.connect(b).process(Both())
    with pytest.raises(GraphError, match="needs event time"):
        a.key_by(lambda x: x).interval_join(b.key_by(lambda x: x)).between(0, 1).apply()
    with pytest.raises(ValueError, match="lower must not be above upper"):
        a.key_by(lambda x: x).interval_join(b.key_by(lambda x: x)).between(2, 1)
    with pytest.raises(TypeError, match="joins keyed streams"):
        a.key_by(lambda x: x).interval_join(b)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="no function that sends side outputs"):
        a.map(str).side_output(OutputTag("x"))
    with pytest.raises(ValueError, match="reserved"):
        OutputTag("__late_left__")
    with pytest.raises(GraphError, match="where"):
        a.join(b).window(Tumbling(1))
    timed = env.from_source(ListSource([{"k": 1, "t": 1.0}]), watermarks=ON_TIME)
    with pytest.raises(GraphError, match="takes no allowed lateness"):
        timed.join(timed).where("k").equal_to("k").window(Tumbling(1)).allowed_lateness(1).apply(how="left")
    with pytest.raises(GraphError, match="KeyedBroadcastProcessFunction"):
        a.key_by(lambda x: x).connect(b.broadcast(MapStateDescriptor("s"))).process(_Rules())
    with pytest.raises(TypeError, match="MapStateDescriptor"):
        b.broadcast("s")


class _Rules(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return [(value, ctx.broadcast_state(RULES).get("factor", 1) * value)]

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.broadcast_state(RULES).put("factor", value)


RULES = MapStateDescriptor("rules")


# -- small behaviours -------------------------------------------------------------------------------

def test_co_flat_map_and_a_non_keyed_co_process_function() -> None:
    class Tag(CoProcessFunction):
        def process_element1(self, value: Any, ctx: Any) -> Any:
            yield ("left", value, ctx.subtask in (0, 1))

        def process_element2(self, value: Any, ctx: Any) -> Any:
            ctx.output(SEEN, value)
            yield ("right", value, True)

    env = _env()
    a, b = env.from_source(ListSource([1, 2])), env.from_source(ListSource([3]))
    flat, processed, seen = CollectSink(), CollectSink(), CollectSink()
    a.connect(b).flat_map(lambda x: [x, x], lambda y: [-y]).sink_to(flat)
    tagged = a.connect(b).process(Tag())
    tagged.sink_to(processed)
    tagged.side_output(SEEN).sink_to(seen)
    env.execute("co")
    assert sorted(flat.committed()) == [-3, 1, 1, 2, 2]
    assert sorted(processed.committed()) == [("left", 1, True), ("left", 2, True), ("right", 3, True)]
    assert seen.committed() == [3]


SEEN = OutputTag("seen")


def test_a_broadcast_function_on_a_stream_not_keyed_reads_the_rules() -> None:
    env = _env(parallelism=1)
    rules = env.from_source(ListSource([10]))
    data = env.from_source(ListSource([1, 2]))
    sink = CollectSink()
    data.connect(rules.broadcast(RULES)).process(_Rules()).sink_to(sink)
    env.execute("rules")
    assert sorted(sink.committed()) in ([(1, 1), (2, 2)], [(1, 10), (2, 20)], [(1, 1), (2, 20)], [(1, 10), (2, 2)])


def test_apply_to_keyed_state_visits_every_key_of_the_subtask() -> None:
    class Reset(KeyedBroadcastProcessFunction):
        def open(self, ctx: Any) -> None:
            self.count = ctx.value_state("count", default=0)

        def process_element(self, value: Any, ctx: Any) -> None:
            self.count.update(self.count.value() + 1)
            ctx.timers.register_event_time(1_000.0)  # after every rule

        def process_broadcast_element(self, value: Any, ctx: Any) -> None:
            ctx.apply_to_keyed_state("count", lambda key, count: count.update(count.value() + 100))

        def on_timer(self, timestamp: float, ctx: Any) -> Any:
            yield (ctx.key, self.count.value())

    env = _env(parallelism=1)
    data = env.from_source(ListSource([{"k": k, "t": float(k)} for k in (1, 2, 2)]), watermarks=ON_TIME)
    rules = env.from_source(ListSource([{"t": 100.0}]), watermarks=ON_TIME)
    sink = CollectSink()
    data.key_by("k").connect(rules.broadcast(RULES)).process(Reset()).sink_to(sink)
    env.execute("apply")
    # the rule visits the keys that had state when it came (the inputs interleave in no set order)
    counts = dict(sink.committed())
    assert set(counts) == {1, 2} and counts[1] in (1, 101) and counts[2] in (2, 102)


def test_side_outputs_beside_dead_letters(tmp_path: Any) -> None:
    """A function that both fails on records (dead letters) and sends records to a side output:
    each goes its own way, exactly once; what it sent for a failed record is taken back."""
    odd = OutputTag("odd")

    class Picky(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            if value % 2:
                ctx.output(odd, value)
            if value == 5:
                raise ValueError("five")
            return [value * 10]

    env = _env(dead_letter=FileSink(str(tmp_path / "dlq")))
    out = env.from_source(ListSource(list(range(8)))).key_by(lambda x: x % 3).process(Picky(), on_error="dead_letter")
    main, side = CollectSink(), CollectSink()
    out.sink_to(main)
    out.side_output(odd).sink_to(side)
    env.execute("dlq")
    assert sorted(main.committed()) == [0, 10, 20, 30, 40, 60, 70]
    assert sorted(side.committed()) == [1, 3, 7]  # 5's side output went with its failure
    letters = read_committed(str(tmp_path / "dlq"))
    assert [r["record"] for r in letters] == [5]


class _ArrowSplit:
    split_id = "arrow"


class _ArrowReader(SplitReader):
    def __init__(self, batch: pa.RecordBatch, position: int | None) -> None:
        self.batch, self.next = batch, position or 0

    def read(self, max_records: int) -> pa.RecordBatch | None:
        if self.next >= self.batch.num_rows:
            return None
        out = self.batch.slice(self.next, 2)
        self.next += out.num_rows
        return out

    def position(self) -> int:
        return self.next


class ArrowSource(Source):
    """One Arrow batch, read two rows at a time."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch

    def splits(self) -> list[Any]:
        return [_ArrowSplit()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _ArrowReader(self.batch, position)


def test_a_semi_window_join_on_arrow_batches() -> None:
    env = _env()
    people = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "t": [1.0, 2.0, 15.0]})
    orders = pa.RecordBatch.from_pydict({"person": [1, 1, 3], "t": [3.0, 4.0, 5.0]})
    a = env.from_source(ArrowSource(people), watermarks=ON_TIME)
    b = env.from_source(ArrowSource(orders), watermarks=ON_TIME)
    sink = CollectSink()
    a.join(b).where("id").equal_to("person").window(Tumbling(10)).apply(how="semi").sink_to(sink)
    env.execute("semi")
    assert collections.Counter(sink.committed()) == collections.Counter([(1, 1.0)])  # once, though two orders met it


def test_a_join_with_declared_schemas_emits_arrow_batches() -> None:
    """Columnar results: one row per pair, the left's columns then the right's, nulls for an
    unmatched left record; the rows a per-record path would see are the same."""
    people = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "t": [1.0, 2.0, 15.0]})
    orders = pa.RecordBatch.from_pydict({"id": [1, 1, 3], "t": [3.0, 4.0, 5.0], "amount": [10, 20, 30]})
    env = _env()
    a = env.from_source(ArrowSource(people), watermarks=ON_TIME)
    b = env.from_source(ArrowSource(orders), watermarks=ON_TIME)
    probe = _ArrowProbe()
    (a.key_by("id").interval_join(b.key_by("id")).between(0, 5)
        .apply(how="left", schemas=(people.schema, orders.schema))
        .sink_to(probe))
    env.execute("columnar")
    assert probe.batches and all(isinstance(batch, pa.RecordBatch) for batch in probe.batches)
    table = pa.Table.from_batches(probe.batches)
    assert table.schema.names == ["id", "t", "right_id", "right_t", "amount"]
    rows = sorted(table.to_pylist(), key=lambda r: (r["id"], r["right_t"] or 0))
    assert rows == [{"id": 1, "t": 1.0, "right_id": 1, "right_t": 3.0, "amount": 10},
                    {"id": 1, "t": 1.0, "right_id": 1, "right_t": 4.0, "amount": 20},
                    {"id": 2, "t": 2.0, "right_id": None, "right_t": None, "amount": None},
                    {"id": 3, "t": 15.0, "right_id": None, "right_t": None, "amount": None}]
    with pytest.raises(GraphError, match="only without a function"):
        a.key_by("id").interval_join(b.key_by("id")).between(0, 5).apply(lambda x, y: x, schemas=(people.schema,
                                                                                                   orders.schema))


class _ArrowWriter(SinkWriter):
    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def write(self, batch: Any) -> None:
        self.batches.append(batch)

    def prepare_commit(self, checkpoint_id: int) -> None:
        return None


class _ArrowProbe(Sink):
    """Keeps the batches as they come (Arrow or lists), in process."""

    def __init__(self) -> None:
        self.batches: list[Any] = []

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _ArrowWriter(self.batches)

    def commit(self, committables: list[Any]) -> None:
        pass
