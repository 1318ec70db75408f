"""Jobs with two inputs for the end-to-end tests, and what they must commit.

Records are dicts `{"k": key, "t": event time, "id": unique id}` from two `ListSource`s with
bounded out-of-orderness watermarks at least as large as the inputs' disorder, so no record is
late and every join's result is the join of all records (`expected`). Each builder takes the
environment and both input lists and returns the result stream.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from epochal import (
    CheckpointConfig,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    MapStateDescriptor,
    OutputTag,
    ProcessJoinFunction,
    RestartStrategy,
    Source,
    SplitReader,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.api.stream import DataStream
from epochal.testing import Crash, ListSource
from epochal.windows import Sliding

JITTER = 0.75  # a record's time is at most this far below the largest time before it in its split
WINDOW = Sliding(3.0, 1.0)
RULES = MapStateDescriptor("rules")


def records(rng: random.Random, n: int, prefix: str, keys: int = 4, span: float = 20.0) -> list[dict[str, Any]]:
    """`n` records over `span` seconds, in time order but for a jitter of up to `JITTER`."""
    base = sorted(rng.uniform(0, span) for _ in range(n))
    return [{"k": rng.randrange(keys), "t": b + rng.uniform(0, JITTER), "id": f"{prefix}{i}"}
            for i, b in enumerate(base)]


def env_of(parallelism: int, checkpoints: str, restarts: int = 3, interval: float = 0.004,
           mode: str = "aligned") -> StreamEnvironment:
    return StreamEnvironment(parallelism=parallelism, executor="inprocess",
                             checkpoint=CheckpointConfig(interval=interval, directory=checkpoints, mode=mode),  # type: ignore[arg-type]
                             restart=RestartStrategy(max_restarts=restarts))


def sources(env: StreamEnvironment, left: list[Any], right: list[Any], splits: int = 2,
            batch_size: int = 3) -> tuple[DataStream, DataStream]:
    watermarks = WatermarkStrategy.bounded_out_of_orderness(JITTER, timestamp="t")
    return (env.from_source(ListSource(left, splits=splits, batch_size=batch_size), name="left", watermarks=watermarks),
            env.from_source(ListSource(right, splits=splits, batch_size=batch_size), name="right",
                            watermarks=watermarks))


class _SlowReader(SplitReader):
    def __init__(self, items: list[Any], position: int | None, pause: float) -> None:
        self.items, self.next, self.pause = items, position or 0, pause

    def read(self, max_records: int) -> list[Any] | None:
        if self.next >= len(self.items):
            return None
        time.sleep(self.pause)
        out = self.items[self.next:self.next + 4]
        self.next += len(out)
        return out

    def position(self) -> int:
        return self.next


class _SlowSplit:
    def __init__(self, i: int, items: list[Any]) -> None:
        self.split_id, self.items = f"slow-{i}", items


class SlowRecords(Source):
    """Records four a read, `pause` seconds apart (wall clock): a job that runs long enough to be
    rescaled, or killed, mid-stream."""

    def __init__(self, items: list[Any], splits: int, pause: float = 0.005) -> None:
        bounds = [len(items) * i // splits for i in range(splits + 1)]
        self._splits = [_SlowSplit(i, items[bounds[i]:bounds[i + 1]]) for i in range(splits)]
        self.pause = pause

    def splits(self) -> list[Any]:
        return self._splits

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _SlowReader(split.items, position, self.pause)


def with_crash(items: list[Any], at: int) -> list[Any]:
    out: list[Any] = list(items)
    out.insert(min(at, len(out)), Crash())
    return out


# -- the jobs -------------------------------------------------------------------------------------

def ids(left: Any, right: Any) -> tuple[str, str | None]:
    return (left["id"], None if right is None else right["id"])


def interval(left: DataStream, right: DataStream, how: str = "inner") -> DataStream:
    return left.key_by("k").interval_join(right.key_by("k")).between(-1.0, 2.0).apply(ids, how=how).uid("j")


def window(left: DataStream, right: DataStream, how: str = "inner") -> DataStream:
    return left.join(right).where("k").equal_to("k").window(WINDOW).process(WindowIds(), how=how).uid("j")


class WindowIds(ProcessJoinFunction):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Iterable[Any]:
        yield (ctx.window[0], left["id"], None if right is None else right["id"])


def temporal(left: DataStream, right: DataStream, how: str = "inner") -> DataStream:
    return left.key_by("k").temporal_join(right.key_by("k")).apply(ids, how=how).uid("j")


class PairWhenBothSeen(KeyedCoProcessFunction):
    """Per key: the records of both sides seen so far; each new record pairs with every record
    of the other side seen before it: every cross-side pair of a key once, in any interleaving."""

    def open(self, ctx: Any) -> None:
        self.lefts = ctx.list_state("lefts")
        self.rights = ctx.list_state("rights")

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        self.lefts.add(value["id"])
        return [(value["id"], r) for r in self.rights.get()]

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        self.rights.add(value["id"])
        return [(left, value["id"]) for left in self.lefts.get()]


ODD_PAIRS = OutputTag("odd-pairs")


class PairsOddToTheSide(PairWhenBothSeen):
    """`PairWhenBothSeen`, the pairs of an odd-numbered left record to the side output `ODD_PAIRS`."""

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        return self._split(super().process_element1(value, ctx), ctx)

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        return self._split(super().process_element2(value, ctx), ctx)

    @staticmethod
    def _split(pairs: Iterable[Any], ctx: Any) -> list[Any]:
        out = []
        for pair in pairs:
            if int(pair[0][1:]) % 2:
                ctx.output(ODD_PAIRS, pair)
            else:
                out.append(pair)
        return out


def co_process(left: DataStream, right: DataStream, how: str = "inner") -> DataStream:
    return left.key_by("k").connect(right.key_by("k")).process(PairWhenBothSeen()).uid("j")


class RulesAtTime(KeyedBroadcastProcessFunction):
    """Broadcast records are rules `(t, id)`; a data record waits for the watermark to pass its
    time, then emits the rules before it: the same in any interleaving of the inputs."""

    def open(self, ctx: Any) -> None:
        self.waiting = ctx.map_state("waiting")

    def process_element(self, value: Any, ctx: Any) -> None:
        self.waiting.put(value["t"], [*(self.waiting.get(value["t"]) or []), value["id"]])
        ctx.timers.register_event_time(math.nextafter(value["t"], math.inf))

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        t = math.nextafter(timestamp, -math.inf)
        rules = sorted(rid for rt, rid in ctx.broadcast_state(RULES).values() if rt < t)
        for record in self.waiting.get(t) or []:
            yield (record, tuple(rules))
        self.waiting.remove(t)

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.broadcast_state(RULES).put(value["id"], (value["t"], value["id"]))


def broadcast(left: DataStream, right: DataStream, how: str = "inner") -> DataStream:
    return left.key_by("k").connect(right.broadcast(RULES)).process(RulesAtTime()).uid("j")


JOBS: dict[str, Callable[..., DataStream]] = {
    "interval": interval, "window": window, "temporal": temporal, "co_process": co_process, "broadcast": broadcast,
}


# -- what they must commit ------------------------------------------------------------------------

def expected(job: str, left: list[dict[str, Any]], right: list[dict[str, Any]], how: str = "inner") -> Counter[Any]:
    out: Counter[Any] = Counter()
    if job == "interval":
        for a in left:
            met = [b["id"] for b in right if b["k"] == a["k"] and a["t"] - 1.0 <= b["t"] <= a["t"] + 2.0]
            out.update((a["id"], b) for b in met)
            if how == "left" and not met:
                out[(a["id"], None)] += 1
    elif job == "window":
        times = [r["t"] for r in (*left, *right)] or [0.0]
        for k in range(WINDOW.first_end_index(min(times)), WINDOW.last_start_index(max(times)) + 1):
            start, end = WINDOW.start_of(k), WINDOW.end_of(k)
            for a in left:
                if not start <= a["t"] < end:
                    continue
                met = [b["id"] for b in right if b["k"] == a["k"] and start <= b["t"] < end]
                out.update((start, a["id"], b) for b in met)
                if how == "left" and not met:
                    out[(start, a["id"], None)] += 1
    elif job == "temporal":
        for a in left:
            versions = [(b["t"], i, b["id"]) for i, b in enumerate(right) if b["k"] == a["k"] and b["t"] <= a["t"]]
            if versions:
                out[(a["id"], max(versions)[2])] += 1
            elif how == "left":
                out[(a["id"], None)] += 1
    elif job == "co_process":
        out.update((a["id"], b["id"]) for a in left for b in right if a["k"] == b["k"])
    elif job == "broadcast":
        for a in left:
            out[(a["id"], tuple(sorted(b["id"] for b in right if b["t"] < a["t"])))] += 1
    return out


def committed(records: Iterable[Any]) -> Counter[Any]:
    """Records as comparable tuples (a JSON file gives lists back)."""
    def frozen(value: Any) -> Any:
        return tuple(frozen(v) for v in value) if isinstance(value, (list, tuple)) else value

    return Counter(frozen(r) for r in records)
