"""Rich functions and operator state: open once per subtask, checkpointed lists that survive a
failure exactly, and a restore at another parallelism that splits or broadcasts them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from epochal import (
    CheckpointConfig,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    MapFunction,
    OperatorError,
    ReduceFunction,
    RestartStrategy,
    StreamEnvironment,
)
from epochal.state.operator_state import OperatorListSnapshot, redistribute, split_part
from epochal.testing import CollectSink, Crash, ListSource


class Counting(MapFunction[int, tuple[int, int]]):
    """Counts the records of its subtask in operator state: `(record, count so far)`."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.operator_list_state("count")
        self.n = sum(self.count.get())

    def map(self, value: int) -> tuple[int, int]:
        time.sleep(0.0002)  # the job spans many checkpoint intervals
        self.n += 1
        return (value, self.n)

    def snapshot_state(self, checkpoint_id: int) -> None:
        self.count.update([self.n])


def test_operator_state_survives_a_crash_exactly(tmp_path: Path) -> None:
    items: list[Any] = list(range(300))
    items.insert(170, Crash())
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.005, directory=str(tmp_path / "c")))
    sink = CollectSink()
    env.from_source(ListSource(items, batch_size=7)).map(Counting()).uid("counting").sink_to(sink)
    result = env.execute("count")
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert sorted(sink.committed()) == [(i, i + 1) for i in range(300)]


class Remember(MapFunction[int, int]):
    """Keeps every record in a split list and a broadcast list; reports what it restored."""

    restored: ClassVar[dict[int, tuple[int, list[int], list[int]]]] = {}
    opened: ClassVar[list[int]] = []

    def open(self, ctx: Any) -> None:
        self.mine = ctx.operator_list_state("mine")  # split
        self.everyone = ctx.operator_list_state("everyone", mode="broadcast")
        Remember.restored[ctx.subtask] = (ctx.parallelism, self.mine.get(), self.everyone.get())
        Remember.opened.append(ctx.subtask)

    def map(self, value: int) -> int:
        self.mine.add(value)
        self.everyone.add(value)
        return value


def _run(tmp_path: Path, parallelism: int, items: list[int], run: int, restore: bool) -> None:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")),
                            restart=RestartStrategy.none())
    env.from_source(ListSource(items, splits=6, batch_size=5), name=f"src-{run}").rebalance().map(
        Remember()).uid("remember").sink_to(CollectSink(), name=f"out-{run}")
    env.execute(f"run-{run}", from_checkpoint="latest" if restore else None, allow_non_restored_state=True)


@pytest.mark.parametrize("new_parallelism", [3, 1, 2])
def test_split_and_broadcast_lists_redistribute_on_rescale(tmp_path: Path, new_parallelism: int) -> None:
    Remember.restored.clear()
    _run(tmp_path, 2, list(range(100)), 1, restore=False)
    before = {s: mine for s, (_, mine, _) in Remember.restored.items()}
    assert before == {0: [], 1: []}  # a fresh start restores nothing
    kept: dict[int, list[int]] = {}
    Remember.restored.clear()
    # run 1 ended with a final checkpoint: what each subtask held is its "mine" list there;
    # run 2 at another parallelism reads nothing new, so it restores and checkpoints again
    _run(tmp_path, new_parallelism, [], 2, restore=True)
    restored = dict(Remember.restored)
    assert sorted(restored) == list(range(new_parallelism))
    split = [restored[s][1] for s in range(new_parallelism)]
    assert sorted(x for part in split for x in part) == list(range(100)), "split: every item once"
    lengths = [len(part) for part in split]
    assert max(lengths) - min(lengths) <= 1, f"split: near-equal contiguous parts, got {lengths}"
    for s in range(new_parallelism):
        assert sorted(restored[s][2]) == list(range(100)), "broadcast: every item on every subtask"
    kept = {s: restored[s][1] for s in restored}
    if new_parallelism == 2:  # the same parallelism: each subtask gets its own list back
        Remember.restored.clear()
        _run(tmp_path, 2, [], 3, restore=True)
        assert {s: Remember.restored[s][1] for s in Remember.restored} == kept


def test_redistribution_is_a_partition_of_the_old_lists() -> None:
    import pickle

    old = [OperatorListSnapshot((("x", "split", pickle.dumps(list(range(i * 10, i * 10 + n)))),))
           for i, n in enumerate([3, 0, 7])]
    for parallelism in (1, 2, 4, 5, 11):
        parts = [redistribute(old, s, parallelism)["x"] for s in range(parallelism)]
        assert [x for p in parts for x in p] == [0, 1, 2, 20, 21, 22, 23, 24, 25, 26]
    same = [redistribute(old, s, 3)["x"] for s in range(3)]
    assert same == [[0, 1, 2], [], [20, 21, 22, 23, 24, 25, 26]]
    assert split_part(list(range(5)), 0, 2) == [0, 1, 2] and split_part(list(range(5)), 1, 2) == [3, 4]


class Lifecycle(FlatMapFunction[int, tuple[str, int]]):
    events: ClassVar[list[tuple[str, int]]] = []

    def open(self, ctx: Any) -> None:
        Lifecycle.events.append(("open", ctx.subtask))
        self.subtask = ctx.subtask

    def flat_map(self, value: int) -> list[tuple[str, int]]:
        return [("x", value)] * (value % 2)

    def close(self) -> None:
        Lifecycle.events.append(("close", self.subtask))


class Even(FilterFunction[int]):
    def open(self, ctx: Any) -> None:
        self.modulus = 2

    def filter(self, value: int) -> bool:
        return value % self.modulus == 0


class Add(ReduceFunction[int]):
    def open(self, ctx: Any) -> None:
        self.calls = 0

    def reduce(self, previous: int, value: int) -> int:
        self.calls += 1
        return previous + value


def test_open_and_close_run_once_per_subtask_for_every_kind() -> None:
    Lifecycle.events.clear()
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    odd, even, sums = CollectSink(), CollectSink(), CollectSink()
    stream = env.from_source(ListSource(list(range(20)), splits=2))
    stream.flat_map(Lifecycle()).sink_to(odd)
    stream.filter(Even()).sink_to(even)
    stream.key_by(lambda x: x % 2).reduce(Add()).sink_to(sums)
    env.execute("kinds")
    assert sorted(Lifecycle.events) == [("close", 0), ("close", 1), ("open", 0), ("open", 1)]
    assert sorted(v for _, v in odd.committed()) == list(range(1, 20, 2))
    assert sorted(even.committed()) == list(range(0, 20, 2))
    assert max(sums.committed()) == sum(range(1, 20, 2))


class BadOpen(MapFunction[int, int]):
    def open(self, ctx: Any) -> None:
        raise RuntimeError("no client")

    def map(self, value: int) -> int:
        return value


def test_an_open_that_fails_names_the_operator() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy.none())
    env.from_source(ListSource([1])).map(BadOpen(), name="lookup").sink_to(CollectSink())
    with pytest.raises(Exception, match="lookup") as info:
        env.execute("bad")
    assert "no client" in str(info.value)
    assert isinstance(info.value.__cause__, OperatorError) or "open" in str(info.value)


class Sessions(KeyedProcessFunction):
    """Registers a processing-time timer far in the future per key; counts keys in operator state."""

    def open(self, ctx: Any) -> None:
        self.keys = ctx.operator_list_state("keys")

    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.timers.register_processing_time(ctx.current_processing_time() + 3600 + value)
        self.keys.add(ctx.key)

    def on_timer(self, timestamp: float, ctx: Any) -> list[Any]:
        return [("fired", ctx.key)]

    def on_end_of_input(self, pending: Any, ctx: Any) -> list[Any]:
        return [("pending", t.key, t.domain.value) for t in pending] + [("end", ctx.key, len(self.keys))]


@pytest.mark.parametrize("timers_at_end", ["report", "fire"])
def test_process_function_end_of_input_fires_or_reports_pending_timers(timers_at_end: str) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource([1, 2, 3])).key_by(lambda x: x).process(
        Sessions(), timers_at_end=timers_at_end).sink_to(sink)  # type: ignore[arg-type]
    env.execute("end")
    out = sorted(sink.committed(), key=repr)
    if timers_at_end == "fire":
        assert out == sorted([("fired", 1), ("fired", 2), ("fired", 3), ("end", None, 3)], key=repr)
    else:
        assert out == sorted([("pending", k, "processing_time") for k in (1, 2, 3)] + [("end", None, 3)], key=repr)


def test_a_rich_function_is_refused_in_a_process_pool() -> None:
    from epochal import GraphError

    env = StreamEnvironment(parallelism=1, executor="inprocess")
    with pytest.raises(GraphError, match="processes= runs plain functions"):
        env.from_source(ListSource([1])).map(Counting(), processes=2)
