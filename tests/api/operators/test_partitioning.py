"""Partitioning (rebalance, broadcast, forward, key groups), parallelism and chaining.

`ProbeSink` records which sink subtask received each record, which is what partitioning decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from epochal import GraphError
from epochal.plan.job_graph import JobGraph
from epochal.plan.specs import PartitionKind
from epochal.testing import CollectSink, ListSource

if TYPE_CHECKING:
    from api.conftest import MakeEnv, ProbeSinks


def _edge_kinds(job: JobGraph) -> dict[tuple[str, str], PartitionKind]:
    return {(job.vertex(e.source).name, job.vertex(e.target).name): e.partitioning.kind for e in job.edges}


# -- what each partitioning does at run time ---------------------------------------------------------


def test_rebalance_spreads_batches_round_robin(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    env = make_env(parallelism=1)
    sink = probe_sink()
    env.from_source(ListSource(list(range(9)), batch_size=1)).rebalance().sink_to(sink).set_parallelism(3)
    env.execute("rebalance")
    assert sink.by_subtask() == {0: [0, 3, 6], 1: [1, 4, 7], 2: [2, 5, 8]}


def test_rebalance_with_set_parallelism(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    env = make_env(parallelism=1)
    sink = probe_sink()
    stream = env.from_source(ListSource(list(range(12)), batch_size=2)).rebalance().map(lambda x: x).set_parallelism(3)
    stream.sink_to(sink).set_parallelism(3)
    job = env.job_graph()
    assert _edge_kinds(job) == {("source", "map -> sink"): PartitionKind.REBALANCE}
    env.execute("rebalance-map")
    parts = sink.by_subtask()
    assert sorted(x for xs in parts.values() for x in xs) == list(range(12))
    assert sorted(len(xs) for xs in parts.values()) == [4, 4, 4]


def test_broadcast_sends_every_record_to_every_subtask(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    env = make_env(parallelism=3)
    sink = probe_sink()
    env.from_source(ListSource(list(range(10)), splits=2)).set_parallelism(2).broadcast().sink_to(sink)
    job = env.job_graph()
    assert _edge_kinds(job)[("source", "sink")] is PartitionKind.BROADCAST
    env.execute("broadcast")
    parts = sink.by_subtask()
    assert set(parts) == {0, 1, 2}
    for records in parts.values():
        assert sorted(records) == list(range(10))


def test_forward_keeps_records_on_the_same_subtask_index(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    env = make_env(parallelism=2)
    sink = probe_sink()
    # split i is read by source subtask i % 2
    env.from_source(ListSource(["s0"] * 5 + ["s1"] * 5, splits=2)).forward().map(str.upper).sink_to(sink)
    env.execute("forward")
    assert sink.by_subtask() == {0: ["S0"] * 5, 1: ["S1"] * 5}


def test_forward_with_unequal_parallelism_raises_graph_error(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    env.from_source(ListSource([1])).forward().map(str, name="mapper").set_parallelism(3).sink_to(CollectSink())
    with pytest.raises(GraphError, match="forward") as info:
        env.job_graph()
    assert "mapper" in str(info.value)
    with pytest.raises(GraphError):
        env.execute("forward-unequal")


def test_key_by_sends_each_key_to_exactly_one_subtask(make_env: MakeEnv, probe_sink: ProbeSinks) -> None:
    env = make_env(parallelism=3)
    sink = probe_sink()
    items = [f"k{i % 17}" for i in range(200)]
    env.from_source(ListSource(items, splits=3, batch_size=5)).key_by(lambda k: k).sink_to(sink)
    assert _edge_kinds(env.job_graph())[("source", "sink")] is PartitionKind.KEY_GROUP
    env.execute("key-by")
    owners: dict[str, set[int]] = {}
    for subtask, key in sink.records:
        owners.setdefault(key, set()).add(subtask)
    assert all(len(s) == 1 for s in owners.values())
    assert sorted(sink.values()) == sorted(items)
    assert len({s for (s,) in owners.values()}) > 1  # the keys do spread


def test_more_source_subtasks_than_splits(make_env: MakeEnv) -> None:
    env = make_env(parallelism=4)
    sink = CollectSink()
    env.from_source(ListSource(list(range(20)), splits=1)).map(lambda x: x + 1).sink_to(sink)
    env.execute("idle-sources")
    assert sorted(sink.committed()) == list(range(1, 21))


# -- parallelism in the job graph ------------------------------------------------------------------


def test_default_parallelism_applies_to_every_operator(make_env: MakeEnv) -> None:
    env = make_env(parallelism=3)
    env.from_source(ListSource([1])).key_by(lambda x: x).count().sink_to(CollectSink())
    assert [v.parallelism for v in env.job_graph().vertices] == [3, 3]


def test_set_parallelism_changes_the_job_graph(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    src = env.from_source(ListSource([1]))
    src.map(str).set_parallelism(4).sink_to(CollectSink()).set_parallelism(1)
    job = env.job_graph()
    assert [(v.name, v.parallelism) for v in job.vertices] == [("source", 2), ("map", 4), ("sink", 1)]
    # no partitioning chosen: unequal parallelism rebalances
    assert _edge_kinds(job) == {("source", "map"): PartitionKind.REBALANCE, ("map", "sink"): PartitionKind.REBALANCE}
    assert len(job.task_ids()) == 7


def test_set_parallelism_validation(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2, max_parallelism=8)
    stream = env.from_source(ListSource([1]))
    with pytest.raises(ValueError, match="parallelism"):
        stream.set_parallelism(0)
    mapped = stream.map(str)
    with pytest.raises(ValueError, match=r"parallelism must be an int in \[1, 8\], got 9"):
        mapped.set_parallelism(9)  # above max_parallelism: refused at once
    mapped.set_parallelism(8).sink_to(CollectSink())
    assert [(v.name, v.parallelism) for v in env.job_graph().vertices] == [("source", 2), ("map", 8), ("sink", 2)]


# -- chaining --------------------------------------------------------------------------------------


def test_operators_with_forward_edges_chain_into_one_vertex(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    env.from_source(ListSource([1])).map(str).filter(bool).flat_map(list).sink_to(CollectSink())
    job = env.job_graph()
    assert len(job.vertices) == 1
    assert [op.name for op in job.vertices[0].chain] == ["source", "map", "filter", "flat_map", "sink"]
    assert job.edges == ()


def test_key_by_breaks_the_chain(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    env.from_source(ListSource([1])).map(str).key_by(lambda x: x).count().map(str, name="format").sink_to(CollectSink())
    job = env.job_graph()
    assert [v.name for v in job.vertices] == ["source -> map", "count -> format -> sink"]
    assert _edge_kinds(job) == {("source -> map", "count -> format -> sink"): PartitionKind.KEY_GROUP}


def test_rebalance_broadcast_and_parallelism_break_the_chain(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    src = env.from_source(ListSource([1]))
    src.rebalance().map(str, name="a").broadcast().map(str, name="b").map(str, name="c").set_parallelism(1).sink_to(
        CollectSink()
    )
    job = env.job_graph()
    assert [(v.name, v.parallelism) for v in job.vertices] == [("source", 2), ("a", 2), ("b", 2), ("c", 1), ("sink", 2)]
    assert _edge_kinds(job) == {
        ("source", "a"): PartitionKind.REBALANCE,
        ("a", "b"): PartitionKind.BROADCAST,
        ("b", "c"): PartitionKind.REBALANCE,
        ("c", "sink"): PartitionKind.REBALANCE,
    }


def test_explicit_forward_chains(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    env.from_source(ListSource([1])).forward().map(str).forward().sink_to(CollectSink())
    assert [v.name for v in env.job_graph().vertices] == ["source -> map -> sink"]


def test_an_operator_with_two_consumers_ends_its_chain(make_env: MakeEnv) -> None:
    env = make_env(parallelism=2)
    mapped = env.from_source(ListSource([1])).map(str)
    mapped.filter(bool).sink_to(CollectSink())
    mapped.map(len).sink_to(CollectSink())
    job = env.job_graph()
    assert [v.name for v in job.vertices] == ["source -> map", "filter -> sink", "map_2 -> sink_2"]
    assert set(_edge_kinds(job).values()) == {PartitionKind.FORWARD}


def test_chained_and_unchained_programs_give_the_same_output(make_env: MakeEnv) -> None:
    outputs = []
    for chained in (True, False):
        env = make_env(parallelism=2)
        sink = CollectSink()
        stream = env.from_source(ListSource(list(range(40)), splits=2))
        stream = stream.map(lambda x: x * 3)
        if not chained:
            stream = stream.rebalance()
        stream.filter(lambda x: x % 2).sink_to(sink)
        assert (len(env.job_graph().vertices) == 1) is chained
        env.execute("chaining")
        outputs.append(sorted(sink.committed()))
    assert outputs[0] == outputs[1] == [x * 3 for x in range(40) if (x * 3) % 2]
