"""The window operator's per-key mode: one `SliceStore` per key in keyed state, one timer per key.

Each key's windows live in one `SliceStore` (`runtime.windowing`: Cutty's shared slices,
dissertation ch. 5), kept as keyed state under `__window__`, so a key's windows are
checkpointed, restored, rescaled and moved with its key group like any state (§4.2). One
event-time timer per key, at the store's next fire time, is what the windowing contract asks
for: when the watermark reaches it, the key's due windows fire. A late record within the allowed
lateness makes its store due at once: its windows fire again at the next watermark. Records
arrive one at a time (`Windowing.add`) or as whole Arrow batches (`Windowing.add_columns`,
vectorized: no Python call per record for count, sum, min and max).

The columnar mode's counterpart is `window_table.TableWindows`; the operator (`windows`) picks
one, applies its error policy and shapes the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from ...errors import RecordError
from ...plan.time import EventTime, TimestampError
from ...state.contract import KeyedStateBackend
from ...state.keygroups import key_group_of
from ..windowing import Admission, FiredWindow, Windowing
from ..windowing.columnar import ColumnarAdmission
from .timers import KeyedTimers, TimeDomain
from .window_output import LateRecord

STORE = "__window__"  # a key's windows: its SliceStore
_EVENT = TimeDomain.EVENT_TIME


class StoreWindows:
    """The `SliceStore`s of one window operator subtask, and their timers."""

    def __init__(self, windowing: Windowing, backend: KeyedStateBackend, event_time: EventTime,
                 value_of: Callable[[Any], Any] | None) -> None:
        self.windowing = windowing
        self.backend = backend
        self.timers = KeyedTimers(backend)
        self.event_time = event_time
        self.value_of = value_of

    def restore(self) -> None:
        self.timers.restore()

    def has_stores(self) -> bool:
        """Whether keyed state holds a key's store (restored state decides the mode)."""
        return next(iter(self.backend.keys(STORE)), None) is not None

    # -- records --------------------------------------------------------------------------------

    def add_records(self, records: list[Any], keys: list[Any], groups: list[int], watermark: float,
                    fail: Callable[[Any, BaseException], RecordError]) -> list[LateRecord]:
        """Add records one by one; the records too late for some window. An error fails the
        attempt: `fail` makes the error naming the record."""
        backend, windowing, event_time, value_of = self.backend, self.windowing, self.event_time, self.value_of
        new_store, add = windowing.new_store, windowing.add
        late: list[LateRecord] = []
        record = None
        try:
            for record, key, group in zip(records, keys, groups):
                ts = event_time.of_record(record)
                backend.set_current_key(key, group)
                store = backend.get_mutable(STORE, new_store)
                before = store.next_fire
                admission = add(store, ts, record if value_of is None else value_of(record), watermark)
                if admission is Admission.LATE or admission is Admission.PARTLY_LATE:
                    late.append(LateRecord(record, windowing.late_queries(store, ts, watermark)))
                self.retime(before, store.next_fire)  # a late update makes the store due now
        except RecordError:
            raise
        except (TimestampError, Exception) as exc:
            raise fail(record, exc) from exc
        return late

    def add_records_tolerant(self, records: list[Any], keys: list[Any], groups: list[int], watermark: float,
                             reject: Callable[[Any, Exception], None]) -> list[LateRecord]:
        """`add_records` with a `try` per record: a record whose time or value cannot be read,
        or that the aggregate fails on, goes to `reject` (skipped or dead-lettered)."""
        backend, windowing, event_time, value_of = self.backend, self.windowing, self.event_time, self.value_of
        new_store, add = windowing.new_store, windowing.add
        late: list[LateRecord] = []
        for record, key, group in zip(records, keys, groups):
            try:
                ts = event_time.of_record(record)
                value = record if value_of is None else value_of(record)
            except Exception as exc:
                reject(record, exc)
                continue
            backend.set_current_key(key, group)
            store = backend.get_mutable(STORE, new_store)
            before = store.next_fire
            try:
                admission = add(store, ts, value, watermark)
            except Exception as exc:
                reject(record, exc)
                if windowing.is_empty(store):  # the key's first record: leave no empty store
                    backend.delete(STORE)
                else:
                    self.retime(before, store.next_fire)
                continue
            if admission is Admission.LATE or admission is Admission.PARTLY_LATE:
                late.append(LateRecord(record, windowing.late_queries(store, ts, watermark)))
            self.retime(before, store.next_fire)
        return late

    def add_columns(self, keys: pa.Array | pa.ChunkedArray, times: Any, values: Any, watermark: float,
                    max_parallelism: int, fail: Callable[[Any, BaseException], RecordError]) -> ColumnarAdmission:
        """Add an Arrow batch's columns (vectorized per key). An error fails the attempt: `fail`
        makes the error naming the batch."""
        backend, windowing = self.backend, self.windowing
        stores: dict[Any, tuple[Any, int, float]] = {}

        def get_store(key: Any) -> Any:
            group = key_group_of(key, max_parallelism)
            backend.set_current_key(key, group)
            store = backend.get_mutable(STORE, windowing.new_store)
            stores[key] = (store, group, store.next_fire)
            return store

        try:
            admission = windowing.add_columns(get_store, keys, times, values, watermark)
        except Exception as exc:
            raise fail(f"<batch of {len(keys)} rows>", exc) from exc
        for key, (store, group, before) in stores.items():
            backend.set_current_key(key, group)
            backend.put(STORE, store)  # a write-back backend (disk) keeps only what is put
            self.retime(before, store.next_fire)
        return admission

    def retime(self, before: float, after: float) -> None:
        """Keep one event-time timer per key, at its store's next fire time."""
        if after == before:
            return
        if math.isfinite(before):
            self.timers.delete(_EVENT, before)
        if math.isfinite(after):
            self.timers.register(_EVENT, after)

    # -- firing ---------------------------------------------------------------------------------

    def has_timers(self) -> bool:
        """Whether some key's store is due at a later watermark (or now, after a late update)."""
        return self.timers.next(_EVENT) is not None

    def fire_due(self, watermark: float, fail: Callable[[Any, BaseException], RecordError]
                 ) -> Iterator[tuple[Any, list[FiredWindow]]]:
        """Fire every key whose timer is at or before `watermark`: each key and its windows, the
        key current in the backend while the caller takes them. A failure is not one record's:
        `fail` makes the error that fails the attempt."""
        backend, windowing = self.backend, self.windowing
        for _, _key in self.timers.pop_due(_EVENT, watermark):
            store = backend.get_mutable(STORE, windowing.new_store)
            key = backend.current_key
            try:
                fired: list[FiredWindow] = windowing.fire(store, watermark)
            except Exception as exc:
                raise fail(f"<windows of key {key!r}>", exc) from exc
            yield key, fired
            if windowing.is_empty(store):
                backend.delete(STORE)
            elif math.isfinite(store.next_fire):
                self.timers.register(_EVENT, store.next_fire)
