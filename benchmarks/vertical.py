"""Vertical elasticity (issue 37, ChronoStream §III-D): more cores for a busy subtask, two ways.

One CPU-heavy job: a paced-source sequence read unpaced (as fast as the job takes it), every
record through `burn` (`WORK` iterations of arithmetic, about 0.1-0.2 ms of one core), then a
keyed running count. At parallelism 1, two ways to give it a second core while it runs:

- *function pool*: `burn` runs in a `map(..., processes=1)`, resized to 2 processes live
  (`JobHandle.resize`, `runtime.operators.function_pool`): no state moves, no barrier;
- *standby slot*: `burn` runs in the keyed operator, and `max_workers=2` keeps a second subtask
  standing by; `JobHandle.rescale(2)` moves half the key groups to it at a checkpoint barrier
  (`runtime.master.migrations`): the key-group move to a co-located slot.

Each against the same job left alone (`unchanged`). In-process every subtask shares one
interpreter, so only the pool can add a core there; on Spark `local[2]` the standby subtask is
a process of its own. Per run: records/s read before the change (from `WARMUP` to the change) and
after it (from `SETTLE` s after the change was answered to the end); the change's own time
(asked → answered); the longest stretch without progress of the source after the change.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from . import elasticity, measuring_sink, soak
from .runner import benchmark

WORK = 4_000
WARMUP = 4.0
CHANGE_AT = 12.0
SETTLE = 3.0
RUN_S = 24.0


def burn(row: Any) -> Any:
    acc = 0
    for i in range(WORK):
        acc = (acc * 31 + i) % 1_000_003
    return row


def _burned_last(acc: Any, row: Any) -> Any:
    return elasticity._last(acc, burn(row))


@dataclass(frozen=True, slots=True)
class Way:
    name: str
    pool: bool  # burn in a pooled map (else in the keyed reduce)
    max_workers: int | None
    change: str | None  # "resize", "rescale" or None


WAYS = (Way("function pool, unchanged", True, None, None), Way("function pool 1 → 2", True, None, "resize"),
        Way("standby slot, unchanged", False, 2, None), Way("standby slot 1 → 2", False, 2, "rescale"))


def _build(env: Any, source: Any, sink: Any, way: Way) -> None:
    rows = env.from_source(source).map(elasticity._row)
    if way.pool:
        rows = rows.map(burn, name="burn", processes=1)
        rows.key_by(soak._key).reduce(elasticity._last).sink_to(sink)
    else:
        rows.key_by(soak._key).reduce(_burned_last).sink_to(sink)


def run_once(spark: Any, directory: str, way: Way) -> dict[str, Any]:
    os.makedirs(directory)
    start = time.time()
    source = elasticity.PacedSplit(10**10, None, start, os.path.join(directory, "pos"))
    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    env = elasticity.environment(spark, elasticity.Setup(way.name, 1, way.max_workers), os.path.join(directory, "ckpt"))
    _build(env, source, measuring_sink.MeasuringSink(lat, start, 1.0), way)
    handle = env.execute_async("vertical")
    samples: list[tuple[float, int]] = []
    asked = answered = None
    deadline = time.time() + 300
    while (source.read_position() or 0) == 0 and time.time() < deadline:  # times count from the first record
        time.sleep(0.05)
    start = time.time()
    while time.time() - start < RUN_S:
        time.sleep(0.1)
        samples.append((time.time() - start, source.read_position() or 0))
        if way.change is not None and asked is None and time.time() - start >= CHANGE_AT:
            asked = time.time() - start
            if way.change == "resize":
                handle.resize("burn", 2, timeout=120)
            else:
                handle.rescale(2, timeout=300)
            answered = time.time() - start
    elasticity.stop_at(handle, time.time())
    change = answered if answered is not None else CHANGE_AT

    def rate(since: float, until: float) -> float | None:
        inside = [(t, n) for t, n in samples if since <= t <= until and n > 0]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    stall, last_t, last_n = 0.0, None, None
    for t, n in samples:
        if t < (asked or CHANGE_AT):
            last_t, last_n = t, n
            continue
        if last_n is None or n > last_n:
            last_t, last_n = t, n
        elif last_t is not None:
            stall = max(stall, t - last_t)
    return {"way": way.name, "before": rate(WARMUP, asked or CHANGE_AT), "after": rate(change + SETTLE, RUN_S),
            "asked": asked, "answered": answered, "stall_s": stall, "attempts": handle.status().attempt}


@benchmark("vertical", "Vertical elasticity: a function pool resized live against a key-group move to a standby slot")
def run(quick: bool) -> dict[str, Any]:
    hosts: list[str] = ["in-process"] if quick else ["in-process", "spark"]
    runs = []
    directory = tempfile.mkdtemp(prefix="epochal-vertical-")
    try:
        for host in hosts:
            spark = None
            if host == "spark":
                from epochal.cluster.spark import create_session

                elasticity.ship(sys.modules[__name__], elasticity, soak, measuring_sink)
                spark = create_session("local[2]")
            for i, way in enumerate(WAYS):
                with elasticity.Neighbours() as neighbours:
                    outcome = run_once(spark, os.path.join(directory, f"{host}-{i}"), way)
                outcome.update(host=host if host == "in-process" else "spark local[2]",
                               neighbour_cores=neighbours.cores)
                runs.append(outcome)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result: dict[str, Any] = {"work": WORK, "change_at": CHANGE_AT, "run_s": RUN_S, "runs": runs}
    result["summary"] = _summary(result)
    return result


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _load_caveat(result: dict[str, Any]) -> list[str]:
    busiest = max((r["neighbour_cores"] or 0.0 for r in result["runs"]), default=0.0)
    if busiest < 0.5:
        return []
    return [f"Other processes kept up to {busiest:.2f} of this machine's {os.cpu_count()} cores busy during these "
            "runs: with no core free, a second process cannot show its gain, and rates swing between windows of "
            "one unchanged run. What these runs do show is what each change costs: how long it took, the "
            "stall after it, and whether it restarted anything.", ""]


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"One CPU-heavy job at parallelism 1 (`burn`: {result['work']:,} iterations a record, then a keyed running "
        f"count), read unpaced for {result['run_s']:g} s; at {result['change_at']:g} s it is given a second core, "
        "either by resizing its `map`'s function pool 1 → 2 (`JobHandle.resize`) or by a live rescale onto a "
        "standby subtask (`max_workers=2`, key groups move at a checkpoint); `unchanged`: the same job left "
        "alone. Records/s read before the change and from 3 s after it was answered; the change's own time; "
        "the longest stretch without progress after it was asked (times from the first record read). "
        "`Neighbours`: cores other processes kept busy.",
        "",
        *_load_caveat(result),
        "| Host | Way | Before (records/s) | After (records/s) | After / before | Change took (s) | "
        "Longest stall (s) | Attempts | Neighbours (cores) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        ratio = r["after"] / r["before"] if r["after"] and r["before"] else None
        took = r["answered"] - r["asked"] if r["asked"] is not None and r["answered"] is not None else None
        lines.append(f"| {r['host']} | {r['way']} | {_fmt(r['before'])} | {_fmt(r['after'])} | {_fmt(ratio, 2)} | "
                     f"{_fmt(took, 2)} | {_fmt(r['stall_s'], 1)} | {r['attempts']} | "
                     f"{_fmt(r['neighbour_cores'], 2)} |")
    return "\n".join(lines)
