"""Windows outside event time, and windows with a trigger: processing time, count, early firings,
count triggers and purging, on the same shared slices (dissertation ch. 5, Cutty).

The time a record is stamped with decides the domain (`plan.triggers.WindowTime`): its event
time, the task's clock when it arrives (processing time), or its index among its key's records
(count windows: periodic windows over indices, whose "watermark" is the key's own count, so a
key's windows fire as soon as its records complete them). Everything else is the event-time
operator's: one `SliceStore` per key in keyed state, one timer per key at its next fire time
(a processing-time instant in processing time: the operator fires them when the clock reaches
them), checkpointed, rescaled and moved with its key group.

Triggers (`plan.triggers`): early firings emit, every `every` seconds of processing time, the
partial result of each incomplete window of the keys that changed since (`Windowing.peek`); a
count trigger counts each window's records (`__trigger__`, per key: window → count) and emits
the window every `n` of them, and nothing at its end; purging empties a window's slices at each
firing (one tumbling query: no other window shares them). Records go one at a time here; the
columnar paths are the event-time operator's.
"""

from __future__ import annotations

import math
from typing import Any

from ...plan.specs import KeyedWindowSpec, OnError, WindowFunctionKind
from ...plan.triggers import CountTrigger, WindowTime
from ...plan.windows import Window
from ..keys import batch_keys
from ..watermarks import END_OF_TIME
from ..windowing import Admission, FiredWindow, Firing, SliceStore
from ..wire.elements import Batch
from .bad_records import DeadLetter, with_letters
from .base import OperatorContext
from .timers import TimeDomain
from .window_output import LateRecord
from .window_stores import STORE
from .windows import KeyedWindowOperator, WindowMode

COUNT = "__count__"  # count windows: how many records of the key came so far
TRIGGER = "__trigger__"  # a count trigger: per window (query, start) of the key, its records since it fired


class TriggeredWindowOperator(KeyedWindowOperator):
    """Window queries per key in processing time, by count, or with a trigger (module docstring)."""

    def __init__(self, spec: KeyedWindowSpec) -> None:
        super().__init__(spec)
        self._mode = WindowMode.STORES
        self._reduction = None
        self.time = spec.time
        trigger = spec.trigger
        self.count_trigger = trigger.count if isinstance(trigger, CountTrigger) else None
        self.early = trigger.early_every if trigger is not None else None
        self.purge = trigger is not None and trigger.purge
        self._dirty: dict[Any, int] = {}  # keys changed since the last early firing → key group
        self._next_early = math.inf

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        if self.early is not None:
            self._next_early = ctx.clock.now() + self.early

    # -- records -------------------------------------------------------------------------------
    def process(self, batch: Batch) -> Batch | None:
        records, keys, groups = batch_keys(batch, self.key, self.ctx.max_parallelism, self.name)
        results: list[Any] = []
        late: list[LateRecord] = []
        letters: list[DeadLetter] = []
        now = self.ctx.clock.now()
        if self.time is WindowTime.PROCESSING and now < self.watermark:
            now = self.watermark  # the clock went back: times never do
        counted: dict[Any, int] = {}  # count windows: the keys of this batch, to fire after it
        for record, key, group in zip(records, keys, groups):
            try:
                self._add(record, key, group, now, results, late, counted)
            except Exception as exc:
                if self.on_error is OnError.FAIL:
                    raise self.record_error(record, exc) from exc
                self.reject(record, exc, letters)
        for key, group in counted.items():
            self._fire_count_window(key, group, results)
        return with_letters(self._out(self._late_updates() + results, late), letters)

    def _add(self, record: Any, key: Any, group: int, now: float, results: list[Any], late: list[LateRecord],
             counted: dict[Any, int]) -> None:
        backend, windowing = self.backend, self.windowing
        backend.set_current_key(key, group)
        value = record if self.value_of is None else self.value_of(record)
        if self.time is WindowTime.COUNT:
            ts = float(backend.get(COUNT, 0))
            watermark = ts
            backend.put(COUNT, int(ts) + 1)
            counted[key] = group
        elif self.time is WindowTime.PROCESSING:
            ts, watermark = now, self.watermark
        else:
            ts, watermark = self.event_time.of_record(record), self.watermark
        store = backend.get_mutable(STORE, windowing.new_store)
        before = store.next_fire
        admission = windowing.add(store, ts, value, watermark)
        if admission is Admission.LATE or admission is Admission.PARTLY_LATE:
            late.append(LateRecord(record, windowing.late_queries(store, ts, watermark)))
        if self.time is not WindowTime.COUNT:
            self.stores.retime(before, store.next_fire)
        if self.count_trigger is not None and admission is not Admission.LATE:
            self._count(key, store, ts, watermark, results)
        if self.early is not None and admission is not Admission.LATE:
            self._dirty[key] = group

    def _count(self, key: Any, store: SliceStore, ts: float, watermark: float, results: list[Any]) -> None:
        """A count trigger: one more record in each open window holding `ts`; a window with
        `count` of them since it last fired fires now (the backend is at `key`)."""
        grid = self.windowing.grid
        assert grid is not None and self.count_trigger is not None
        counts: dict[tuple[int, float], int] = self.backend.get_mutable(TRIGGER, dict)
        fired: list[FiredWindow] = []
        lateness = self.windowing.lateness
        for q, w in enumerate(grid.windows):
            for start, end in w.windows_containing(ts):
                if end + lateness <= watermark:
                    continue  # closed: the record is late for it
                n = counts.get((q, start), 0) + 1
                if n < self.count_trigger:
                    counts[(q, start)] = n
                    continue
                counts.pop((q, start), None)
                window = grid.window_result(store, q, start, end, Firing.COUNT)
                if window is not None:
                    fired.append(window)
                if self.purge:
                    self._empty(store, start, end)
        if fired:
            self._emit(key, fired, results)

    def _fire_count_window(self, key: Any, group: int, results: list[Any]) -> None:
        """Count windows: fire what the key's records completed (its count is its watermark)."""
        backend = self.backend
        backend.set_current_key(key, group)
        store = backend.get_mutable(STORE, self.windowing.new_store)
        count = float(backend.get(COUNT, 0))
        if store.next_fire <= count:
            self._emit(key, self.windowing.fire(store, count), results)
        if self.windowing.is_empty(store):
            backend.delete(STORE)

    def _empty(self, store: SliceStore, start: float, end: float) -> None:
        before = store.next_fire
        self.windowing.empty_window(store, start, end)
        if self.time is not WindowTime.COUNT:
            self.stores.retime(before, store.next_fire)

    # -- firing --------------------------------------------------------------------------------
    def _fire_due(self, watermark: float, results: list[Any]) -> None:
        """Fire the keys due at `watermark` (the clock, in processing time); a count trigger
        emits nothing at a window's end, but closed windows leave its counts."""
        if self.count_trigger is None:
            super()._fire_due(watermark, results)
            return
        lateness = self.windowing.lateness
        grid = self.windowing.grid
        assert grid is not None
        for _key, _ in self.stores.fire_due(watermark, self.record_error):
            counts = self.backend.get(TRIGGER)
            if counts:
                kept = {w: n for w, n in counts.items() if w[1] + grid.windows[w[0]].size + lateness > watermark}
                if kept:
                    self.backend.put(TRIGGER, kept)
                else:
                    self.backend.delete(TRIGGER)

    def _emit(self, key: Any, fired: list[FiredWindow], results: list[Any]) -> None:
        if self.spec.kind is not WindowFunctionKind.PROCESS:
            self.output.add_windows(results, key, fired)
            return
        for f in fired:
            try:
                produced = self.spec.function.process(key, Window(f.query, f.start, f.end), f.result)
                if produced is not None:
                    results.extend(list(produced))
            except Exception as exc:
                self.reject(f"<window [{f.start}, {f.end}) of key {key!r}>", exc, results)

    def on_watermark(self, watermark: float) -> Batch | None:
        if self.time is WindowTime.EVENT:
            return super().on_watermark(watermark)
        return None  # the clock or the count completes these windows, not the watermark

    def next_timer(self) -> float | None:
        best = self._next_early
        if self.time is WindowTime.PROCESSING and (t := self.stores.timers.next(TimeDomain.EVENT_TIME)) is not None:
            best = min(best, t)
        return None if best == math.inf else best

    def on_processing_time(self, now: float) -> Batch | None:
        results: list[Any] = []
        if self.time is WindowTime.PROCESSING and now > self.watermark:
            self.watermark = now
            self._fire_due(now, results)
        if now >= self._next_early:
            self._fire_early(results)
            self._next_early = now + (self.early or math.inf)
        return self._out(results, [])

    def _fire_early(self, results: list[Any]) -> None:
        """Every changed key's incomplete windows, as they stand (`Firing.EARLY`); emptied after
        if the trigger purges."""
        dirty, self._dirty = self._dirty, {}
        backend, windowing = self.backend, self.windowing
        for key, group in dirty.items():
            if group not in backend.key_groups:
                continue  # moved away since (a live migration)
            backend.set_current_key(key, group)
            store = backend.get(STORE)
            if store is None:
                continue
            fired = windowing.peek(store, self.watermark)
            if not fired:
                continue
            if self.purge:
                store = backend.get_mutable(STORE, windowing.new_store)
                for f in fired:
                    self._empty(store, f.start, f.end)
                if windowing.is_empty(store):
                    backend.delete(STORE)
            self._emit(key, fired, results)

    def end_input(self) -> Batch | None:
        """Processing time: the windows still open fire now, as if the clock reached their end
        (a bounded input's last windows are not lost); count windows not complete stay unfired."""
        if self.time is not WindowTime.PROCESSING:
            return None
        results: list[Any] = []
        self.watermark = END_OF_TIME
        self._fire_due(END_OF_TIME, results)
        return self._out(results, [])

