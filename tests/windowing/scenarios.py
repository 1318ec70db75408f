"""Test scenarios for the windowing core: user-defined windows, aggregates with their reference
results, random event traces (hypothesis), and drivers that run a trace through the engine's
per-record and columnar paths the way the runtime will (fire a key when its next fire time is due).
"""

from __future__ import annotations

import math
import operator
import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st
from reference import Emission, Member, Reference

from epochal.plan.windows import DeterministicWindow, Session, Sliding, Tumbling
from epochal.runtime.windowing import (
    Admission,
    Aggregate,
    Count,
    Max,
    Min,
    Process,
    Reduce,
    Sum,
    WindowAggregate,
    Windowing,
)
from epochal.runtime.windowing.session_table import SessionTable
from epochal.runtime.windowing.table import SliceTable
from epochal.runtime.windowing.table_firing import FiredColumns
from epochal.runtime.windowing.table_partials import Reduction
from epochal.state.keygroups import key_group_of

# -- user-defined deterministic windows (dissertation §5.4.2) -------------------------------------


class CountWindows(DeterministicWindow[int]):
    """Cutty's periodic count window: range `size` records, a new window every `slide` records."""

    def __init__(self, size: int, slide: int) -> None:
        self.size, self.slide = size, slide

    def initial_state(self) -> int:
        return 0

    def on_record(self, state: int, timestamp: float, value: Any) -> tuple[int, int, int]:
        begins = 1 if state % self.slide == 0 else 0
        ends = 1 if state >= self.size and (state - self.size) % self.slide == 0 else 0
        return state + 1, begins, ends

    def __repr__(self) -> str:
        return f"CountWindows({self.size}, {self.slide})"


class Punctuation(DeterministicWindow[bool]):
    """A record whose value is a multiple of `every` closes the open window and opens the next."""

    def __init__(self, every: int) -> None:
        self.every = every

    def initial_state(self) -> bool:
        return False

    def on_record(self, state: bool, timestamp: float, value: Any) -> tuple[bool, int, int]:
        if value % self.every == 0:
            return True, 1, 1 if state else 0
        return state, 0, 0

    def __repr__(self) -> str:
        return f"Punctuation({self.every})"


class PriceRegime(DeterministicWindow[tuple[float | None, tuple[float, ...]]]):
    """The dissertation's stock example (§5.2.2): windows begin every 2 s with a 4 s range while the
    price is high (> 5), every 1 s with a 2.5 s range while it is low; ends are kept FIFO."""

    def initial_state(self) -> tuple[float | None, tuple[float, ...]]:
        return None, ()

    def on_record(self, state: tuple[float | None, tuple[float, ...]], timestamp: float,
                  value: Any) -> tuple[tuple[float | None, tuple[float, ...]], int, int]:
        next_begin, open_ends = state
        ends = 0
        while ends < len(open_ends) and open_ends[ends] <= timestamp:
            ends += 1
        remaining = open_ends[ends:]
        begins = 0
        if next_begin is None or timestamp >= next_begin:
            slide, size = (2.0, 4.0) if value > 5 else (1.0, 2.5)
            begins = 1
            next_begin = timestamp + slide
            remaining = (*remaining, max(timestamp + size, remaining[-1] if remaining else -math.inf))
        return (next_begin, remaining), begins, ends

    def __repr__(self) -> str:
        return "PriceRegime()"


# -- aggregates and their results by definition ---------------------------------------------------


def _values(members: list[Member]) -> list[Any]:
    return [m[2] for m in sorted(members, key=lambda m: (m[0], m[1]))]


AGGREGATES: dict[str, tuple[WindowAggregate, Any]] = {
    "count": (Count(), len),
    "sum": (Sum(), lambda ms: sum(_values(ms))),
    "min": (Min(), lambda ms: min(_values(ms))),
    "max": (Max(), lambda ms: max(_values(ms))),
    "process": (Process(), _values),
    "reduce_or": (Reduce(operator.or_), lambda ms: _or_all(_values(ms))),
    "aggregate": (Aggregate(lambda: (0, 0), lambda v, acc: (acc[0] + v, acc[1] + 1),
                            lambda a, b: (a[0] + b[0], a[1] + b[1]), lambda acc: acc),
                  lambda ms: (sum(_values(ms)), len(ms))),
}


def _or_all(values: list[int]) -> int:
    out = 0
    for v in values:
        out |= v
    return out


# -- traces ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    key: str
    ts: float
    value: int


@dataclass(frozen=True)
class Mark:
    watermark: float


Event = Rec | Mark


@dataclass(frozen=True)
class Scenario:
    queries: dict[str, Any]
    aggregate: str
    lateness: float
    events: list[Event]
    cuts: list[bool]  # per record: a columnar batch ends after it

    def engine(self) -> Windowing:
        return Windowing(self.queries, AGGREGATES[self.aggregate][0], self.lateness)

    def reference(self) -> Reference:
        return Reference(self.queries, AGGREGATES[self.aggregate][1], self.lateness)


def periodic_windows(unit: float) -> st.SearchStrategy[Any]:
    if unit == 0.5:
        sizes, slides = [1.0, 1.5, 2.0, 3.0, 4.0, 5.0], [0.5, 1.0, 1.5, 2.0, 3.0]
    else:  # decimal steps: edges are not exact binary fractions
        sizes, slides = [0.3, 0.7, 1.0, 1.3, 2.1], [0.1, 0.2, 0.3, 0.7, 1.1]

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        if draw(st.booleans()):
            size = draw(st.sampled_from(sizes))
            return Tumbling(size, offset=draw(st.sampled_from([0.0, size / 3])))
        slide = draw(st.sampled_from(slides))
        return Sliding(draw(st.sampled_from(sizes)), slide, offset=draw(st.sampled_from([0.0, slide / 2])))

    return build()


def window_lists(slides: list[float], sizes: list[float], offsets: list[float],
                 max_size: int) -> st.SearchStrategy[list[Any]]:
    """Lists of tumbling and sliding windows, each offset by a share (`offsets`) of its slide."""

    @st.composite
    def one(draw: st.DrawFn) -> Any:
        slide = draw(st.sampled_from(slides))
        offset = slide * draw(st.sampled_from(offsets))
        if draw(st.booleans()):
            return Tumbling(slide, offset=offset)
        return Sliding(draw(st.sampled_from(sizes)), slide, offset=offset)

    return st.lists(one(), min_size=1, max_size=max_size)


def any_window(unit: float) -> st.SearchStrategy[Any]:
    return st.one_of(
        periodic_windows(unit),
        periodic_windows(unit),
        st.builds(Session, st.sampled_from([unit, 2 * unit, 4 * unit])),
        st.builds(CountWindows, st.integers(1, 5), st.integers(1, 3)),
        st.builds(Punctuation, st.sampled_from([3, 4])),
        st.just(PriceRegime()),
    )


@st.composite
def scenarios(draw: st.DrawFn, *, many_periodic: bool = False, max_records: int = 40,
              periodic_only: bool = False, sessions_only: bool = False, aggregates: tuple[str, ...] = (),
              drifting_keys: bool = False) -> Scenario:
    """A random scenario. Keys are "a" and "b", or with `drifting_keys` a key is live for a
    while and then never seen again, new ones arriving all along (auctions, sessions): dozens
    of keys, so a table drops idle keys' slots and gives them to new keys."""
    unit = draw(st.sampled_from([0.5, 0.1]))
    if many_periodic:
        windows = draw(st.lists(periodic_windows(unit), min_size=13, max_size=20))
    elif sessions_only:
        windows = draw(st.lists(st.builds(Session, st.sampled_from([unit, 2 * unit, 4 * unit, 10 * unit])),
                                min_size=1, max_size=3))
    else:
        windows = draw(st.lists(periodic_windows(unit) if periodic_only else any_window(unit), min_size=1,
                                max_size=3))
    queries = {f"q{i}": w for i, w in enumerate(windows)}
    aggregate = draw(st.sampled_from(sorted(aggregates or AGGREGATES)))
    lateness = draw(st.sampled_from([0.0, 1.0, 2.5, 7 * unit]))
    bound = draw(st.sampled_from([0.0, unit, 2.0]))  # watermark = largest time so far - bound
    rows = draw(st.lists(st.tuples(
        st.integers(0, 3) if drifting_keys else st.sampled_from("ab"),
        st.integers(0, 60),
        st.integers(0, 9),
        st.one_of(st.just(0), st.integers(0, 6), st.integers(0, 40)),  # delay: mostly small
        st.booleans(),  # a watermark after it
        st.booleans(),  # a batch boundary after it
    ), min_size=min(8, max_records), max_size=max_records))
    arrivals = sorted(range(len(rows)), key=lambda i: (rows[i][1] + rows[i][3], i))
    events: list[Event] = []
    cuts: list[bool] = []
    largest = -math.inf
    for i in arrivals:
        key, step, value, _, mark, cut = rows[i]
        if drifting_keys:  # keys step // 3 .. step // 3 + 3: each lives for about 12 steps
            key = f"k{step // 3 + int(key)}"
        ts = step * unit
        events.append(Rec(key, ts, value))
        cuts.append(cut)
        largest = max(largest, ts)
        if mark:
            events.append(Mark(largest - bound))
    events.append(Mark(math.inf))
    return Scenario(queries, aggregate, lateness, events, cuts)


# -- drivers --------------------------------------------------------------------------------------

Outcome = tuple[list[list[Emission]], set[tuple[int, str]]]


def run_reference(scenario: Scenario) -> Outcome:
    reference = scenario.reference()
    emitted: list[list[Emission]] = []
    late: set[tuple[int, str]] = set()
    seq = 0
    for event in scenario.events:
        if isinstance(event, Mark):
            emitted.append(reference.advance(event.watermark))
        else:
            late.update((seq, q) for q in reference.record(event.key, event.ts, event.value))
            seq += 1
    return emitted, late


def _fire(engine: Windowing, stores: dict[str, Any], watermark: float, fire_all: bool) -> list[Emission]:
    out: list[Emission] = []
    for key, store in stores.items():
        due = engine.next_fire_time(store) <= watermark and engine.next_fire_time(store) < math.inf
        if due or fire_all:
            fired = engine.fire(store, watermark)
            assert due or not fired, f"{key}: windows fired before the store said they were due: {fired}"
            if engine.cutty is None and engine.sessions is None:  # periodic windows: the time is exact
                assert fired or not due, f"{key}: due at {watermark} but emitted nothing"
            order = [(f.end, f.start, list(engine.queries).index(f.query)) for f in fired]
            assert order == sorted(order), "windows of one key come in (end, start, query) order"
            out.extend((key, f.query, f.start, f.end, f.result, f.firing.value) for f in fired)
    return out


def run_records(scenario: Scenario, *, fire_all: bool = False, pickle_stores: bool = False) -> Outcome:
    engine = scenario.engine()
    stores: dict[str, Any] = {}
    watermark = -math.inf
    emitted: list[list[Emission]] = []
    late: set[tuple[int, str]] = set()
    seq = 0
    for event in scenario.events:
        if isinstance(event, Mark):
            watermark = max(watermark, event.watermark)
            emitted.append(_fire(engine, stores, watermark, fire_all))
            if pickle_stores:  # the stores are plain values: a checkpoint and restore changes nothing
                stores = pickle.loads(pickle.dumps(stores))
            continue
        store = stores.setdefault(event.key, engine.new_store())
        admission = engine.add(store, event.ts, event.value, watermark)
        if admission in (Admission.LATE, Admission.PARTLY_LATE):
            late.update((seq, q) for q in engine.late_queries(store, event.ts, watermark))
        seq += 1
    return emitted, late


def run_columns(scenario: Scenario, *, arrow_keys: bool = True) -> Outcome:
    engine = scenario.engine()
    stores: dict[str, Any] = {}
    watermark = -math.inf
    emitted: list[list[Emission]] = []
    late: set[tuple[int, str]] = set()
    batch: list[Rec] = []
    seq = 0

    def flush() -> None:
        nonlocal seq
        if not batch:
            return
        keys = pa.array([r.key for r in batch]) if arrow_keys else [r.key for r in batch]
        result = engine.add_columns(lambda k: stores.setdefault(k, engine.new_store()), keys,
                                    pa.array([r.ts for r in batch], pa.float64()),
                                    pa.array([r.value for r in batch], pa.int64()), watermark)
        for row, queries in zip(result.late_rows.tolist(), result.late_queries):
            late.update((seq + row, q) for q in queries)
        seq += len(batch)
        batch.clear()

    cuts = iter(scenario.cuts)
    for event in scenario.events:
        if isinstance(event, Mark):
            flush()
            watermark = max(watermark, event.watermark)
            emitted.append(_fire(engine, stores, watermark, False))
            continue
        batch.append(event)
        if next(cuts):
            flush()
    flush()
    return emitted, late


def canonical(outcome: Outcome) -> Outcome:
    """Emissions of each watermark event in a fixed order (keys fire in any order)."""
    emitted, late = outcome
    return [sorted(event, key=lambda e: (e[0], e[3], e[2], e[1], repr(e[4]), e[5])) for event in emitted], late


def describe(scenario: Scenario) -> str:
    return f"{scenario.queries} {scenario.aggregate} lateness={scenario.lateness}"



# -- the columnar slice table (periodic queries; count, sum, min, max) -------------------------------

TABLE_AGGREGATES = ("count", "sum", "min", "max")


def table_of(scenario: Scenario) -> SliceTable | SessionTable:
    """A slice table for periodic queries, a session table for sessions."""
    engine = scenario.engine()
    assert engine.cutty is None and (engine.grid is None) != (engine.sessions is None)
    if engine.sessions is not None:
        return SessionTable(engine.sessions, Reduction(scenario.aggregate))
    assert engine.grid is not None
    return SliceTable(engine.grid, Reduction(scenario.aggregate))


def _table_emissions(fired: FiredColumns | None, names: list[str]) -> list[Emission]:
    if fired is None:
        return []
    return [(k, names[q], s, e, r, f.value) for k, q, s, e, r, f in
            zip(fired.key_list(), fired.query.tolist(), fired.start.tolist(), fired.end.tolist(),
                fired.result.tolist(), fired.firings())]


def run_table(scenario: Scenario, *, restore_at: int | None = None, parallelism: int = 1,
              rescale_to: int | None = None) -> Outcome:
    """The scenario on slice tables, one per subtask (keys spread over `parallelism` subtasks by
    key group). After the `restore_at`-th batch or watermark event, every table is exported per
    key group, pickled and loaded into fresh tables, `rescale_to` subtasks of them if given (a
    checkpoint and a restore, or a rescale by restore; between a batch and the next watermark,
    late updates are still pending); batches are cut at the scenario's `cuts`."""
    groups = 16
    names = list(scenario.queries)
    subtasks = parallelism
    tables = [table_of(scenario) for _ in range(subtasks)]
    watermark = -math.inf
    emitted: list[list[Emission]] = []
    late: set[tuple[int, str]] = set()
    batch: list[Rec] = []
    seq = 0

    def group_of(key: Any) -> int:
        return key_group_of(key, groups)

    def owner(key: Any) -> int:
        return group_of(key) * subtasks // groups

    def restore() -> None:
        nonlocal tables, subtasks, points
        if points == restore_at:
            entries = [e for table in tables for e in table.export().items()]
            entries = pickle.loads(pickle.dumps(entries))
            subtasks = rescale_to or subtasks
            tables = [table_of(scenario) for _ in range(subtasks)]
            for s, table in enumerate(tables):
                table.load((g, e) for g, e in entries if g * subtasks // groups == s)
        points += 1

    def flush() -> None:
        nonlocal seq
        if not batch:
            return
        for s, table in enumerate(tables):
            rows = [i for i, r in enumerate(batch) if owner(r.key) == s]
            if not rows:
                continue
            mine = [batch[i] for i in rows]
            result = table.add(pa.array([r.key for r in mine]), np.array([r.ts for r in mine], dtype=np.float64),
                               None if scenario.aggregate == "count" else np.array([r.value for r in mine]),
                               watermark, group_of)
            for row, queries in zip(result.late_rows.tolist(), result.late_queries):
                late.update((seq + rows[row], q) for q in queries)
        seq += len(batch)
        batch.clear()
        restore()

    cuts = iter(scenario.cuts)
    points = 0
    for event in scenario.events:
        if isinstance(event, Mark):
            flush()
            watermark = max(watermark, event.watermark)
            out: list[Emission] = []
            for table in tables:
                out.extend(_table_emissions(table.fire(watermark), names))
            emitted.append(out)
            restore()
            continue
        batch.append(event)
        if next(cuts):
            flush()
    flush()
    return emitted, late
