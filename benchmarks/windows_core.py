"""Micro-benchmark of the windowing core: shared slices against per-window buckets.

Records/s of `epochal.runtime.windowing` (no engine around it: no sources, no channels, no state
backend) against a per-window-buckets baseline implemented here, which adds each record to every
window holding it, as Flink's window assigners and Spark's `window()` do. Both count records per
key and window and fire at the same watermarks, in two forms each:

- per record: one Python call per record (`Windowing.add` / a bucket update per window);
- columnar: Arrow batches (`Windowing.add_columns` / the buckets baseline vectorized in numpy:
  each row repeated once per window holding it, grouped per (key, window));
- table: Arrow batches into one `SliceTable` (a row per key, a column per slice), every due window
  of every key fired in one pass, as the window operator does on the columnar path.

Workloads (a): one 60 s window sliding by 60, 30, 10, 5, 1 and 0.5 s; (b): 1, 10 and 100
concurrent sliding queries on one stream (query i: size 60 + i s, slide 30 + i % 30 s), each in
order and with 20 % of the records delayed by up to 5 s (the watermark trails by 5 s, so none is
late). The results of both sides are checked against each other. Run:
`python -m benchmarks.windows_core [--records N] [--json PATH]`.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from epochal.plan.windows import Sliding
from epochal.runtime.windowing import Count, SliceStore, Windowing
from epochal.runtime.windowing.table import SliceTable
from epochal.runtime.windowing.table_partials import Reduction

KEYS = 10
RATE = 1000.0  # records per second of event time
DELAY = 5.0  # the watermark trails the largest timestamp by this much
BATCH = 5000  # records between watermarks (and per Arrow batch)


def make_stream(n: int, disorder: float, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """(keys, timestamps) in arrival order: a share `disorder` of records delayed by up to DELAY."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0.0, n / RATE, n))
    keys = rng.integers(0, KEYS, n)
    arrival = ts.copy()
    delayed = rng.random(n) < disorder
    arrival[delayed] += rng.uniform(0.0, DELAY, int(delayed.sum()))
    order = np.argsort(arrival, kind="stable")
    return keys[order], ts[order]


def watermarks(ts: np.ndarray) -> list[float]:
    """The watermark after each batch: largest timestamp so far minus DELAY."""
    return [float(ts[: i + BATCH].max()) - DELAY for i in range(0, len(ts), BATCH)]


# -- shared slicing ---------------------------------------------------------------------------------


def slicing_records(windows: list[Sliding], keys: np.ndarray, ts: np.ndarray) -> tuple[float, int]:
    engine = Windowing({f"q{i}": w for i, w in enumerate(windows)}, Count())
    add, fire, due = engine.add, engine.fire, engine.next_fire_time
    stores: dict[int, SliceStore] = {}
    total = 0
    key_list, ts_list = keys.tolist(), ts.tolist()
    marks = watermarks(ts)
    start = time.perf_counter()
    watermark = -math.inf
    for b, i in enumerate(range(0, len(ts_list), BATCH)):
        for key, t in zip(key_list[i:i + BATCH], ts_list[i:i + BATCH]):
            store = stores.get(key)
            if store is None:
                store = stores[key] = engine.new_store()
            add(store, t, None, watermark)
        watermark = marks[b]
        for store in stores.values():
            if due(store) <= watermark:
                total += sum(f.result for f in fire(store, watermark))
    for store in stores.values():
        total += sum(f.result for f in fire(store, math.inf))
    return time.perf_counter() - start, total


def slicing_columns(windows: list[Sliding], keys: np.ndarray, ts: np.ndarray) -> tuple[float, int]:
    engine = Windowing({f"q{i}": w for i, w in enumerate(windows)}, Count())
    stores: dict[int, SliceStore] = {}
    batches = [(pa.array(keys[i:i + BATCH]), pa.array(ts[i:i + BATCH])) for i in range(0, len(ts), BATCH)]
    marks = watermarks(ts)

    def get_store(key: Any) -> SliceStore:
        store = stores.get(key)
        if store is None:
            store = stores[key] = engine.new_store()
        return store

    total = 0
    start = time.perf_counter()
    watermark = -math.inf
    for b, (key_batch, ts_batch) in enumerate(batches):
        engine.add_columns(get_store, key_batch, ts_batch, None, watermark)
        watermark = marks[b]
        for store in stores.values():
            if engine.next_fire_time(store) <= watermark:
                total += sum(f.result for f in engine.fire(store, watermark))
    for store in stores.values():
        total += sum(f.result for f in engine.fire(store, math.inf))
    return time.perf_counter() - start, total


def slicing_table(windows: list[Sliding], keys: np.ndarray, ts: np.ndarray) -> tuple[float, int]:
    engine = Windowing({f"q{i}": w for i, w in enumerate(windows)}, Count())
    assert engine.grid is not None
    table = SliceTable(engine.grid, Reduction.COUNT)
    batches = [(pa.array(keys[i:i + BATCH]), ts[i:i + BATCH]) for i in range(0, len(ts), BATCH)]
    marks = watermarks(ts)
    total = 0
    start = time.perf_counter()
    watermark = -math.inf
    for b, (key_batch, ts_batch) in enumerate(batches):
        table.add(key_batch, ts_batch, None, watermark, lambda key: 0)
        watermark = marks[b]
        fired = table.fire(watermark)
        total += int(fired.result.sum()) if fired is not None else 0
    fired = table.fire(math.inf)
    total += int(fired.result.sum()) if fired is not None else 0
    return time.perf_counter() - start, total


# -- the baseline: per-window buckets ---------------------------------------------------------------


class Buckets:
    """Per-window state, as window assigners keep it: a count per (query, window, key), a timer per
    window; each record goes into every window holding it."""

    def __init__(self, windows: list[Sliding]) -> None:
        self.windows = [(w.size, w.slide, w.offset) for w in windows]
        self.counts: dict[tuple[int, int, Any], int] = {}
        self.timers: list[tuple[float, int, int, Any]] = []

    def add(self, key: Any, ts: float) -> None:
        counts, timers = self.counts, self.timers
        for q, (size, slide, offset) in enumerate(self.windows):
            k = math.floor((ts - offset) / slide)
            while offset + k * slide + size > ts:
                bucket = (q, k, key)
                n = counts.get(bucket)
                if n is None:
                    counts[bucket] = 1
                    heapq.heappush(timers, (offset + k * slide + size, q, k, key))
                else:
                    counts[bucket] = n + 1
                k -= 1

    def add_counts(self, q: int, window: np.ndarray, key: np.ndarray, n: np.ndarray) -> None:
        size, slide, offset = self.windows[q]
        counts, timers = self.counts, self.timers
        for k, kk, c in zip(window.tolist(), key.tolist(), n.tolist()):
            bucket = (q, k, kk)
            old = counts.get(bucket)
            if old is None:
                counts[bucket] = c
                heapq.heappush(timers, (offset + k * slide + size, q, k, kk))
            else:
                counts[bucket] = old + c

    def fire(self, watermark: float) -> int:
        total = 0
        timers = self.timers
        while timers and timers[0][0] <= watermark:
            _, q, k, key = heapq.heappop(timers)
            total += self.counts.pop((q, k, key))
        return total


def buckets_records(windows: list[Sliding], keys: np.ndarray, ts: np.ndarray) -> tuple[float, int]:
    buckets = Buckets(windows)
    add = buckets.add
    key_list, ts_list = keys.tolist(), ts.tolist()
    marks = watermarks(ts)
    total = 0
    start = time.perf_counter()
    for b, i in enumerate(range(0, len(ts_list), BATCH)):
        for key, t in zip(key_list[i:i + BATCH], ts_list[i:i + BATCH]):
            add(key, t)
        total += buckets.fire(marks[b])
    total += buckets.fire(math.inf)
    return time.perf_counter() - start, total


def buckets_columns(windows: list[Sliding], keys: np.ndarray, ts: np.ndarray) -> tuple[float, int]:
    buckets = Buckets(windows)
    marks = watermarks(ts)
    total = 0
    start = time.perf_counter()
    for b, i in enumerate(range(0, len(ts), BATCH)):
        key_batch = np.asarray(pa.array(keys[i:i + BATCH]))
        ts_batch = np.asarray(pa.array(ts[i:i + BATCH]))
        for q, (size, slide, offset) in enumerate(buckets.windows):
            last = np.floor((ts_batch - offset) / slide).astype(np.int64)
            per_row = math.ceil(size / slide) + 1
            k = np.repeat(last, per_row) - np.tile(np.arange(per_row), len(last))
            rows = np.repeat(np.arange(len(last)), per_row)
            holds = (offset + k * slide + size > ts_batch[rows]) & (offset + k * slide <= ts_batch[rows])
            k, rows = k[holds], rows[holds]
            group = (k - k.min()) * KEYS + key_batch[rows] if len(k) else k
            distinct, n = np.unique(group, return_counts=True)
            if len(k):
                buckets.add_counts(q, distinct // KEYS + k.min(), distinct % KEYS, n)
        total += buckets.fire(marks[b])
    total += buckets.fire(math.inf)
    return time.perf_counter() - start, total


# -- the run ----------------------------------------------------------------------------------------

Runner = Callable[[list[Sliding], np.ndarray, np.ndarray], tuple[float, int]]


def measure(name: str, windows: list[Sliding], n: int, disorder: float, repeat: int) -> dict[str, Any]:
    keys, ts = make_stream(n, disorder)
    row: dict[str, Any] = {
        "workload": name, "queries": len(windows), "out_of_order": disorder,
        "windows_per_record": round(sum(w.size / w.slide for w in windows), 1), "records": n,
    }
    totals = {}
    runners: dict[str, Runner] = {"slicing_records": slicing_records, "buckets_records": buckets_records,
                                  "slicing_columns": slicing_columns, "buckets_columns": buckets_columns,
                                  "slicing_table": slicing_table}
    for label, run in runners.items():
        best = math.inf
        for _ in range(repeat):
            seconds, totals[label] = run(windows, keys, ts)
            best = min(best, seconds)
        row[label] = n / best
    if len(set(totals.values())) != 1:
        raise AssertionError(f"{name}: the four runs disagree on the window counts: {totals}")
    row["window_results"] = totals["slicing_records"]
    row["speedup_records"] = row["slicing_records"] / row["buckets_records"]
    row["speedup_columns"] = row["slicing_columns"] / row["buckets_columns"]
    row["speedup_table"] = row["slicing_table"] / row["buckets_columns"]
    return row


def workloads() -> list[tuple[str, list[Sliding]]]:
    out = [(f"60s/{slide:g}s", [Sliding(60.0, slide)]) for slide in (60.0, 30.0, 10.0, 5.0, 1.0, 0.5)]
    for count in (1, 10, 100):
        out.append((f"{count} queries", [Sliding(60.0 + i, 30.0 + i % 30) for i in range(count)]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2, help="runs per measurement (the best counts)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    header = (f"{'workload':<14}{'order':>7}{'win/rec':>9}{'slices/s':>12}{'buckets/s':>12}{'x':>7}"
              f"{'slices col/s':>14}{'buckets col/s':>15}{'x':>7}{'table/s':>12}{'x':>7}")
    print(header)
    for name, windows in workloads():
        for disorder in (0.0, 0.2):
            row = measure(name, windows, args.records, disorder, args.repeat)
            rows.append(row)
            print(f"{name:<14}{'20% ooo' if disorder else 'in ord':>7}{row['windows_per_record']:>9}"
                  f"{row['slicing_records']:>12,.0f}{row['buckets_records']:>12,.0f}{row['speedup_records']:>7.1f}"
                  f"{row['slicing_columns']:>14,.0f}{row['buckets_columns']:>15,.0f}{row['speedup_columns']:>7.1f}"
                  f"{row['slicing_table']:>12,.0f}{row['speedup_table']:>7.1f}",
                  flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
