"""`Windowing`: the window queries of one operator, run over one `SliceStore` per key.

The engine holds only configuration (queries, aggregate, lateness, slice arithmetic); all state is
in the stores, so the runtime can keep one store per key in keyed state and the engine needs no
checkpointing. Periodic queries share one set of slices (`grid`), sessions merge their own
(`sessions`), user-defined windows run through Cutty's aggregator (`cutty`).

Contract with the caller (what event-time timers per key provide):
- `add(store, ts, value, watermark)` per record, with the operator's current watermark; its
  `Admission` says whether to route the record to the late output (`late_queries` says for which
  queries when it is `PARTLY_LATE`).
- `fire(store, watermark)` whenever `watermark >= next_fire_time(store)`, before adding records at
  that watermark; it returns the windows to emit, ordered by (end, start, query).
- `is_empty(store)`: the store holds nothing a future record or watermark could need.

Lateness: a window is open for late records until `end + allowed_lateness <= watermark`. A record
behind the watermark is counted by the open windows that hold it and fires them again; a record no
open window of a query holds is late for that query (sessions: its own window `[ts, ts + gap)` has
closed; user-defined windows: see `cutty`). A record in no window at all (a sampling gap, before a
user-defined window begins) is on time and in no result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...plan.time import Duration, seconds
from ...plan.windows import DeterministicWindow, PeriodicWindow, Session, WindowSpec, check_window
from .aggregates import Combining, Count, Max, Min, Sum, Values, WindowAggregate
from .columnar import (
    ColumnarAdmission,
    key_codes,
    python_list,
    session_rows,
    slice_rows,
    take,
    timestamps_in_seconds,
)
from .cutty import Cutty
from .grid import Grid
from .sessions import Sessions
from .store import Admission, FiredWindow, FireFirst, SliceStore

AddRecord = Callable[[SliceStore, float, Any, float], Admission]

_ON_TIME = Admission.ON_TIME


class Windowing:
    """Window aggregation on shared slices for one operator (dissertation ch. 5, Cutty).

    Args:
        queries: window definitions by name (several share partial aggregates), or one definition
            (named "window").
        aggregate: what each window computes (`Count()`, `Sum()`, `Min()`, `Max()`, `Reduce(fn)`,
            `Aggregate(...)`, `Process()`).
        allowed_lateness: how long after its end a window still takes late records and fires
            again (seconds or `timedelta`).

    Example:
        >>> from epochal.plan.windows import Sliding, Session
        >>> w = Windowing({"10s": Sliding(10, 5), "s": Session(3)}, Count())
        >>> store = w.new_store()
        >>> [w.add(store, t, None, 0.0).value for t in (1.0, 2.0, 7.0)]
        ['on_time', 'on_time', 'on_time']
        >>> [(f.query, f.start, f.end, f.result) for f in w.fire(store, 10.0)]
        [('10s', -5.0, 5.0, 2), ('s', 1.0, 5.0, 2), ('10s', 0.0, 10.0, 3), ('s', 7.0, 10.0, 1)]
        >>> w.next_fire_time(store)  # the window [5, 15) holds the record at 7
        15.0
    """

    def __init__(self, queries: Mapping[str, WindowSpec] | WindowSpec, aggregate: WindowAggregate,
                 allowed_lateness: Duration = 0.0) -> None:
        named = dict(queries) if isinstance(queries, Mapping) else {"window": queries}
        if not named:
            raise ValueError("windowing needs at least one window query")
        if not isinstance(aggregate, WindowAggregate):
            raise TypeError(f"aggregate must be a WindowAggregate (Count(), Sum(), ...), got {aggregate!r}")
        self.queries = {str(name): check_window(spec, str(name)) for name, spec in named.items()}
        self.aggregate = aggregate
        self.lateness = seconds(allowed_lateness, "allowed_lateness")
        self.keep_records = aggregate.combining is Combining.KEEP_RECORDS
        self._order = {name: i for i, name in enumerate(self.queries)}
        periodic = [(n, s) for n, s in self.queries.items() if not isinstance(s, (Session, DeterministicWindow))]
        sessions = [(n, s) for n, s in self.queries.items() if isinstance(s, Session)]
        udws = [(n, s) for n, s in self.queries.items() if isinstance(s, DeterministicWindow)]
        self.grid = Grid([n for n, _ in periodic], [s for _, s in periodic if isinstance(s, PeriodicWindow)],
                         aggregate, self.lateness) if periodic else None
        self.sessions = Sessions([n for n, _ in sessions], [s.gap for _, s in sessions], aggregate,
                                 self.lateness) if sessions else None
        self.cutty = Cutty([n for n, _ in udws], [s for _, s in udws], aggregate, self.lateness) if udws else None
        self.add: AddRecord = self._hot_add() if self.grid and not (self.sessions or self.cutty) else self._add

    def new_store(self) -> SliceStore:
        """The state of a key with no records yet."""
        return SliceStore(cutty=self.cutty.new_state() if self.cutty else None)

    # -- records -----------------------------------------------------------------------------

    def _hot_add(self) -> AddRecord:
        """The per-record path for periodic queries only: one cached-slice test and one partial
        update per record, specialised per aggregate (no call for count, sum, min, max)."""
        grid = self.grid
        assert grid is not None
        on_time, behind = grid.add_on_time, self._add
        aggregate = self.aggregate
        if type(aggregate) is Count:
            def add(store: SliceStore, ts: float, value: Any, watermark: float) -> Admission:
                if ts >= watermark:
                    lo = store.lo
                    if lo <= ts < store.hi:
                        store.partials[lo] += 1
                    else:
                        on_time(store, ts, value)
                    return _ON_TIME
                return behind(store, ts, value, watermark)
        elif type(aggregate) is Sum:
            def add(store: SliceStore, ts: float, value: Any, watermark: float) -> Admission:
                if ts >= watermark:
                    lo = store.lo
                    if lo <= ts < store.hi:
                        store.partials[lo] += value
                    else:
                        on_time(store, ts, value)
                    return _ON_TIME
                return behind(store, ts, value, watermark)
        elif type(aggregate) in (Min, Max):
            smaller = type(aggregate) is Min

            def add(store: SliceStore, ts: float, value: Any, watermark: float) -> Admission:
                if ts >= watermark:
                    lo = store.lo
                    if lo <= ts < store.hi:
                        partials = store.partials
                        if (value < partials[lo]) if smaller else (value > partials[lo]):
                            partials[lo] = value
                    else:
                        on_time(store, ts, value)
                    return _ON_TIME
                return behind(store, ts, value, watermark)
        elif not self.keep_records:
            fold = aggregate.fold

            def add(store: SliceStore, ts: float, value: Any, watermark: float) -> Admission:
                if ts >= watermark:
                    lo = store.lo
                    if lo <= ts < store.hi:
                        store.partials[lo] = fold(store.partials[lo], value)
                    else:
                        on_time(store, ts, value)
                    return _ON_TIME
                return behind(store, ts, value, watermark)
        else:
            return self._add
        return add

    def _add(self, store: SliceStore, ts: float, value: Any, watermark: float) -> Admission:
        """The per-record path for any mix of queries."""
        item = (ts, value) if self.keep_records else value
        if ts < watermark:
            return self.add_behind(store, ts, item, watermark)
        if self.grid:
            if store.lo <= ts < store.hi:
                store.partials[store.lo] = self.aggregate.fold(store.partials[store.lo], item)
            else:
                self.grid.add_on_time(store, ts, item)
        if self.sessions:
            for q in range(len(self.sessions.gaps)):
                self.sessions.add(store, q, ts, item)
        if self.cutty:
            assert store.cutty is not None
            at = self.cutty.stage(store.cutty, ts, value)
            if at < store.next_fire:
                store.next_fire = at
        return _ON_TIME

    def add_behind(self, store: SliceStore, ts: float, item: Any, watermark: float) -> Admission:
        """A record behind the watermark (`item` is what slices keep: `(ts, value)` for
        `Process`, else the value)."""
        if watermark > store.fired:
            if store.next_fire <= watermark:
                raise FireFirst(f"windows are due at watermark {store.next_fire}: fire the store before "
                                f"adding records at watermark {watermark}")
            store.fired = watermark  # nothing was due in between: as if fired at this watermark
        accepted = late = False
        if self.grid:
            counted, late_here = self.grid.add_behind(store, ts, item, watermark)
            accepted |= counted
            late |= bool(late_here)
        if self.sessions:
            for q in range(len(self.sessions.gaps)):
                if self.sessions.is_late(q, ts, watermark):
                    late = True
                else:
                    self.sessions.add(store, q, ts, item)
                    accepted = True
        if self.cutty:
            assert store.cutty is not None
            counted, changed, late_here = self.cutty.add_behind(store.cutty, ts, item, watermark)
            accepted |= counted
            late |= bool(late_here)
            if changed:
                store.next_fire = min(store.next_fire, store.fired)
        if late:
            return Admission.PARTLY_LATE if accepted else Admission.LATE
        return Admission.LATE_UPDATE if accepted else _ON_TIME

    def late_queries(self, store: SliceStore, ts: float, watermark: float) -> tuple[str, ...]:
        """The queries a record at `ts` is (or was, when added at this watermark) too late for."""
        late: set[str] = set()
        if self.grid:
            late.update(self.grid.names[q] for q in self.grid.late_queries(ts, watermark))
        if self.sessions:
            late.update(n for q, n in enumerate(self.sessions.names) if self.sessions.is_late(q, ts, watermark))
        if self.cutty and ts < watermark:
            assert store.cutty is not None
            late.update(self.cutty.names[q] for q in self.cutty.late_queries(store.cutty, ts, watermark))
        return tuple(sorted(late, key=self._order.__getitem__))

    def add_columns(self, get_store: Callable[[Any], SliceStore], keys: Any, timestamps: Any, values: Values,
                    watermark: float) -> ColumnarAdmission:
        """Add a batch of rows: `keys` (Arrow or numpy; keys or key indices), `timestamps` (Arrow time
        column or seconds), `values` (what the aggregate reads; None for a count).

        `get_store(key)` returns the key's store (creating it), called once per distinct key.
        """
        ts = timestamps_in_seconds(timestamps)
        codes, distinct = key_codes(keys)
        if len(codes) != len(ts) or (values is not None and len(values) != len(ts)):
            raise ValueError(f"keys, timestamps and values differ in length: {len(codes)}, {len(ts)}, "
                             f"{'-' if values is None else len(values)}")
        stores = [get_store(k) for k in distinct]
        n = len(ts)
        items: Values = values
        python_values: list[Any] | None = None
        if self.keep_records or self.cutty:
            python_values = python_list(values, n)
        if self.keep_records:
            assert python_values is not None
            items = list(zip(ts.tolist(), python_values))
        behind = ts < watermark
        on_time = np.flatnonzero(~behind)
        if len(on_time):
            on_codes, on_ts, on_items = codes[on_time], ts[on_time], take(items, on_time)
            if self.grid:
                slice_rows(self.grid, self.aggregate, stores, on_codes, on_ts, on_items)
            if self.sessions:
                session_rows(self.sessions, self.aggregate, stores, on_codes, on_ts, on_items)
            if self.cutty:
                assert python_values is not None
                stage = self.cutty.stage
                for row in on_time.tolist():
                    store = stores[codes[row]]
                    assert store.cutty is not None
                    at = stage(store.cutty, float(ts[row]), python_values[row])
                    if at < store.next_fire:
                        store.next_fire = at
        late_rows: list[int] = []
        late_queries: list[tuple[str, ...]] = []
        updated: dict[int, None] = {}
        behind_rows = np.flatnonzero(behind)
        if len(behind_rows):
            behind_items = python_list(take(items, behind_rows), len(behind_rows))
            for row, item in zip(behind_rows.tolist(), behind_items):
                code = int(codes[row])
                store, t = stores[code], float(ts[row])
                admission = self.add_behind(store, t, item, watermark)
                if admission is Admission.LATE or admission is Admission.PARTLY_LATE:
                    late_rows.append(row)
                    late_queries.append(self.late_queries(store, t, watermark))
                if admission is Admission.LATE_UPDATE or admission is Admission.PARTLY_LATE:
                    updated[code] = None
        return ColumnarAdmission(distinct, np.array(late_rows, dtype=np.int64), late_queries,
                                 [distinct[c] for c in updated])

    # -- watermarks --------------------------------------------------------------------------

    def fire(self, store: SliceStore, watermark: float) -> list[FiredWindow]:
        """The windows of this key to emit at `watermark`, ordered by (end, start, query): those
        the watermark completed and those late records changed; then frees what no window needs."""
        previous = store.fired
        if watermark < previous:
            watermark = previous
        out: list[FiredWindow] = []
        if self.grid:
            self.grid.fire(store, watermark, previous, out)
        if self.sessions:
            self.sessions.fire(store, watermark, previous, out)
        if self.cutty:
            assert store.cutty is not None
            self.cutty.fire(store.cutty, watermark, out)
        store.fired = watermark
        store.next_fire = self._next_fire(store)
        if len(out) > 1:
            order = self._order
            out.sort(key=lambda f: (f.end, f.start, order[f.query]))
        return out

    def peek(self, store: SliceStore, watermark: float) -> list[FiredWindow]:
        """The partial results of this key's windows not complete at `watermark` that hold
        records, ordered by (end, start, query): an early firing (`Firing.EARLY`). Periodic
        windows and sessions only (a user-defined window's records wait for the watermark)."""
        out: list[FiredWindow] = []
        if self.grid:
            self.grid.peek(store, watermark, out)
        if self.sessions:
            self.sessions.peek(store, max(watermark, store.fired), out)
        if len(out) > 1:
            order = self._order
            out.sort(key=lambda f: (f.end, f.start, order[f.query]))
        return out

    def empty_window(self, store: SliceStore, start: float, end: float) -> None:
        """Empty periodic window `[start, end)`: its slices go (a purging trigger; one tumbling
        query), and the store's next fire time follows."""
        assert self.grid is not None
        self.grid.empty_window(store, start, end)
        store.next_fire = self._next_fire(store)

    def _next_fire(self, store: SliceStore) -> float:
        best = math.inf
        if self.grid:
            best = min(best, self.grid.next_fire(store))
        if self.sessions:
            best = min(best, self.sessions.next_fire(store))
        if self.cutty:
            assert store.cutty is not None
            best = min(best, self.cutty.next_fire(store.cutty, store.fired))
        return best

    def next_fire_time(self, store: SliceStore) -> float:
        """The watermark at which `store` must be fired next (inf: nothing pending); an event-time
        timer for the key at this time keeps the contract.

        Exact for periodic windows; a lower bound for sessions (a session extended since may end
        later) and user-defined windows (buffered records may end no window): firing then emits
        nothing and the next call gives the time to wait for.
        """
        return store.next_fire

    def is_empty(self, store: SliceStore) -> bool:
        """Whether the store holds nothing (the key's state may be cleared)."""
        if store.starts or store.refires or any(s.starts for s in store.sessions):
            return False
        return store.cutty is None or self.cutty is None or self.cutty.is_empty(store.cutty)

