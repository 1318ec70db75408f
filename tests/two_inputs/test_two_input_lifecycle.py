"""The functions of two-input operators are rich functions too (issue 35): `open(ctx)` once per
subtask with its index and parallelism, `close()` once, and operator list state kept beside the
operator's own state (broadcast maps, a join's watermark), split on rescale."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, ClassVar

import pytest

from epochal import (
    BroadcastProcessFunction,
    CheckpointConfig,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    MapStateDescriptor,
    ProcessJoinFunction,
    RestartStrategy,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.testing import CollectSink, ListSource

ON_TIME = WatermarkStrategy.for_monotonous_timestamps(timestamp="t")
LIMIT = MapStateDescriptor("limit")
EVENTS: list[tuple[str, str, int, int]] = []  # (function, "open"/"close", subtask, parallelism)
RESTORED: dict[tuple[str, int], list[Any]] = {}  # (function, subtask) -> its restored list


class _Hooks:
    """open/close recorded; every record of the first input kept in a split operator list."""

    label: ClassVar[str] = ""

    def open(self, ctx: Any) -> None:
        self.seen = ctx.operator_list_state("seen")
        self.at = (ctx.subtask, ctx.parallelism)
        RESTORED[(self.label, ctx.subtask)] = self.seen.get()
        EVENTS.append((self.label, "open", *self.at))

    def close(self) -> None:
        EVENTS.append((self.label, "close", *self.at))


class Co(_Hooks, CoProcessFunction[dict[str, int], dict[str, int], int]):
    label = "co"

    def process_element1(self, value: dict[str, int], ctx: Any) -> list[int]:
        self.seen.add(value["n"])
        return [value["n"]]

    def process_element2(self, value: dict[str, int], ctx: Any) -> list[int]:
        return []


class KeyedCo(_Hooks, KeyedCoProcessFunction[int, dict[str, int], dict[str, int], int]):
    label = "keyed_co"

    def process_element1(self, value: dict[str, int], ctx: Any) -> list[int]:
        self.seen.add(value["n"])
        return [value["n"]]

    def process_element2(self, value: dict[str, int], ctx: Any) -> list[int]:
        return []


class Limits(_Hooks, BroadcastProcessFunction[dict[str, int], dict[str, int], int]):
    label = "broadcast"

    def process_element(self, value: dict[str, int], ctx: Any) -> list[int]:
        self.seen.add(value["n"])
        return [value["n"]] if value["n"] <= ctx.broadcast_state(LIMIT).get("max", 10**9) else []

    def process_broadcast_element(self, value: dict[str, int], ctx: Any) -> list[int]:
        ctx.broadcast_state(LIMIT).put("max", value["n"])
        return []


class KeyedLimits(_Hooks, KeyedBroadcastProcessFunction[int, dict[str, int], dict[str, int], int]):
    label = "keyed_broadcast"

    def process_element(self, value: dict[str, int], ctx: Any) -> list[int]:
        self.seen.add(value["n"])
        return [value["n"]] if value["n"] <= ctx.broadcast_state(LIMIT).get("max", 10**9) else []

    def process_broadcast_element(self, value: dict[str, int], ctx: Any) -> list[int]:
        ctx.broadcast_state(LIMIT).put("max", value["n"])
        return []


class Pairs(_Hooks, ProcessJoinFunction[dict[str, int], dict[str, int], tuple[int, int]]):
    label = "join"

    def process_element(self, left: dict[str, int], right: dict[str, int], ctx: Any) -> list[tuple[int, int]]:
        self.seen.add(left["n"])
        return [(left["n"], right["n"])]


KINDS = ("co", "keyed_co", "broadcast", "keyed_broadcast", "join")


def _job(env: StreamEnvironment, items: list[dict[str, int]], run: int, sinks: dict[str, CollectSink]) -> None:
    def src(name: str, records: list[dict[str, int]]) -> Any:
        return env.from_source(ListSource(records, splits=2, batch_size=4), name=f"{name}-{run}", watermarks=ON_TIME)

    rules = [{"n": 10**6, "t": 0}]  # a limit no record reaches: every record passes
    a, b = src("a", items), src("b", items)
    key = lambda r: r["n"] % 7  # noqa: E731
    a.connect(b).process(Co()).uid("co").sink_to(sinks["co"], name=f"co-out-{run}")
    a.key_by(key).connect(b.key_by(key)).process(KeyedCo()).uid("keyed_co").sink_to(
        sinks["keyed_co"], name=f"kco-out-{run}")
    a.connect(src("r1", rules).broadcast(LIMIT)).process(Limits()).uid("broadcast").sink_to(
        sinks["broadcast"], name=f"b-out-{run}")
    a.key_by(key).connect(src("r2", rules).broadcast(LIMIT)).process(KeyedLimits()).uid("keyed_broadcast").sink_to(
        sinks["keyed_broadcast"], name=f"kb-out-{run}")
    a.key_by(lambda r: r["n"]).interval_join(b.key_by(lambda r: r["n"])).between(0, 0).process(Pairs()).uid(
        "join").sink_to(sinks["join"], name=f"j-out-{run}")


def _run(tmp_path: Path, parallelism: int, items: list[dict[str, int]], run: int) -> dict[str, CollectSink]:
    env = StreamEnvironment(parallelism=parallelism, executor="inprocess", restart=RestartStrategy.none(),
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    sinks = {kind: CollectSink() for kind in KINDS}
    _job(env, items, run, sinks)
    env.execute(f"run-{run}", from_checkpoint="latest" if run > 1 else None, allow_non_restored_state=True)
    return sinks


def test_two_input_functions_open_once_per_subtask_and_close() -> None:
    EVENTS.clear()
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    sinks = {kind: CollectSink() for kind in KINDS}
    items = [{"n": i, "t": i} for i in range(40)]
    _job(env, items, 1, sinks)
    env.execute("lifecycle")
    for kind in KINDS:
        assert sorted((what, s, p) for k, what, s, p in EVENTS if k == kind) == [
            ("close", 0, 2), ("close", 1, 2), ("open", 0, 2), ("open", 1, 2)], kind
    for kind in ("co", "keyed_co", "broadcast", "keyed_broadcast"):
        assert sorted(sinks[kind].committed()) == list(range(40)), kind
    assert sorted(sinks["join"].committed()) == [(i, i) for i in range(40)]


@pytest.mark.parametrize("new_parallelism", [3, 1])
def test_two_input_operator_lists_split_on_rescale(tmp_path: Path, new_parallelism: int) -> None:
    items = [{"n": i, "t": i} for i in range(60)]
    RESTORED.clear()
    _run(tmp_path, 2, items, 1)
    assert all(not part for part in RESTORED.values())  # a fresh start restores nothing
    RESTORED.clear()
    _run(tmp_path, new_parallelism, [], 2)  # restores the final checkpoint of run 1, reads nothing new
    for kind in KINDS:
        parts = [RESTORED[(kind, s)] for s in range(new_parallelism)]
        assert collections.Counter(x for part in parts for x in part) == collections.Counter(range(60)), kind
