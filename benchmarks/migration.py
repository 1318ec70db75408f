"""Live migration (issue 18): the latency a move of key groups adds, against the size of the state.

A keyed running count on Spark (`local[2]`, parallelism 2), fed open-loop by `elasticity`'s paced
sequence at `RATE` records/s over 1,024 hot keys; beside them, cold keys loaded once at the start
(one record each, `BLOB` bytes) make the keyed state 10 MB, 100 MB or 1 GB. Latency is sink time − the
record's due time, per record, gathered into 250 ms buckets by `elasticity`'s measuring sink (the
cold records are filtered out before it). In each run a quarter of the key groups (32 of 128)
move from subtask 0 to subtask 1 at `MOVES[0]` seconds, all at once, and back at `MOVES[1]`
seconds, eight groups per checkpoint (`batch=8`). The figures: the worst latency in the 4 s
after each move against the steady worst before the first, the longest gap without output, and
how long each move took (asked to done).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any

from epochal.api.connector import Source, SplitReader

from . import elasticity, soak
from .runner import benchmark, pyplot, save_figure

RATE = 200_000.0  # records/s, well under the job's maximum at parallelism 2
BLOB = 1024  # bytes per cold key
SIZES_MB = (10, 100, 1000)
MOVES = ((8.0, None), (16.0, 8))  # (seconds after the start, batch): a quarter there, then back
RUN_S = 24.0
MOVED = tuple(range(0, 64, 2))  # 32 of subtask 0's 64 key groups


class _ColdSplit:
    split_id = "cold"


class _ColdReader(SplitReader):
    def __init__(self, keys: int, position: int | None) -> None:
        self.keys, self.next = keys, position or 0

    def read(self, max_records: int) -> list[Any] | None:
        if self.next >= self.keys:
            return None
        end = min(self.keys, self.next + max_records)
        # a bytes object of its own per key: one shared by all would be pickled once per file
        # (pickle's memo), and the state would be far smaller on disk than it is said to be
        out = [(f"cold-{i}", 0, -1, i.to_bytes(8, "little") * (BLOB // 8)) for i in range(self.next, end)]
        self.next = end
        return out

    def position(self) -> int:
        return self.next


class ColdKeys(Source):
    """`keys` records, one per cold key, each holding `BLOB` bytes: the bulk of the state."""

    def __init__(self, keys: int) -> None:
        self.keys = keys

    def splits(self) -> list[Any]:
        return [_ColdSplit()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _ColdReader(self.keys, position)


def _hot(x: int) -> tuple[int, int, int]:
    return (x % soak.KEYS, 1, x)


def _key(row: Any) -> Any:
    return row[0]


def _count(acc: Any, row: Any) -> tuple[Any, int, int]:
    return (row[0], acc[1] + 1, row[2])


def _measured(row: Any) -> bool:
    return row[2] >= 0  # not a cold key's one record


def run_once(spark: Any, directory: str, size_mb: int) -> dict[str, Any]:
    from epochal import CheckpointConfig, StreamEnvironment

    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    start = time.time() + 10.0 + size_mb / 20  # the input is due from here: the cold keys load meanwhile
    env = StreamEnvironment(parallelism=2, spark=spark, batch_size=256,
                            checkpoint=CheckpointConfig(interval=1.0, directory=os.path.join(directory, "ckpt"),
                                                        retain=2))
    hot = env.from_source(elasticity.PacedSplit(int(RATE * (RUN_S + 30)), RATE, start)).map(_hot)
    cold = env.from_source(ColdKeys(size_mb * 1024 * 1024 // BLOB))
    (hot.union(cold).key_by(_key).reduce(_count).filter(_measured)
        .sink_to(elasticity.LatencySink(lat, start, RATE)))
    handle = env.execute_async("migration")
    moves = []
    for (at, batch), there in zip(MOVES, (True, False), strict=True):
        time.sleep(max(0.0, start + at - time.time()))
        asked = time.time()
        handle.move_key_groups({g: 1 if there else 0 for g in MOVED}, batch=batch, timeout=300)
        moves.append({"at": asked - start, "batch": batch, "took_s": time.time() - asked})
    elasticity.stop_at(handle, start + RUN_S)
    rows = [r[:3] for r in elasticity.read_buckets(lat)]
    return {"size_mb": size_mb, "moves": moves, "buckets": rows, "figures": _figures(rows, moves)}


def _figures(rows: list[tuple[float, int, float]], moves: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [r for r in rows if 0 <= r[0] < RUN_S]
    steady = [r[2] for r in rows if 2.0 <= r[0] < MOVES[0][0]]
    after = [{"batch": move["batch"], **elasticity.after_change(rows, move["at"]), "took_s": move["took_s"]}
             for move in moves]
    return {"steady_max_s": max(steady, default=None), "after": after}


@benchmark("migration", "Live migration: latency a move of key groups adds, by state size")
def run(quick: bool) -> dict[str, Any]:
    from pyspark import cloudpickle

    from epochal.cluster.spark import create_session

    for module in (sys.modules[__name__], elasticity, soak):
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    spark = create_session("local[2]")
    runs = []
    directory = tempfile.mkdtemp(prefix="epochal-migration-")
    try:
        for size in SIZES_MB[:1] if quick else SIZES_MB:
            where = os.path.join(directory, str(size))
            os.makedirs(where)
            runs.append(run_once(spark, where, size))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out = {"rate": RATE, "blob": BLOB, "moved_groups": len(MOVED), "bucket_s": elasticity.BUCKET, "runs": runs}
    _plot(out)
    out["summary"] = _summary(out)
    return out


def _summary(result: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:,.0f}"

    lines = [
        f"A keyed running count on `local[2]` at parallelism 2, paced open-loop at {result['rate']:,.0f} records/s "
        f"over {soak.KEYS:,} hot keys, beside cold keys of {result['blob']:,} B that make the state's size; 1 s "
        f"checkpoints. {result['moved_groups']} of 128 key groups (a quarter) move from subtask 0 to subtask 1 at "
        f"{MOVES[0][0]:.0f} s, all at once, and back at {MOVES[1][0]:.0f} s, {MOVES[1][1]} per checkpoint. Latency: "
        "sink time − the record's due time, worst per 250 ms; gap: the longest stretch without output in the 4 s "
        "after a move was asked for; took: asked to done.",
        "",
        "| State | Steady worst (ms) | All at once: worst (ms) | gap (ms) | took (ms) | "
        "Batches of 8: worst (ms) | gap (ms) | took (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        f = r["figures"]
        once, batched = (f["after"] + [{}, {}])[:2]
        lines.append(
            f"| {r['size_mb']} MB | {ms(f['steady_max_s'])} | {ms(once.get('worst_latency_s'))} | "
            f"{ms(once.get('longest_gap_s'))} | {ms(once.get('took_s'))} | {ms(batched.get('worst_latency_s'))} | "
            f"{ms(batched.get('longest_gap_s'))} | {ms(batched.get('took_s'))} |"
        )
    lines += ["", "![latency through moves](img/migration.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for r in result["runs"]:
        pts = [(t, worst) for t, n, worst in r["buckets"] if n and 0 <= t < RUN_S]
        ax.plot([p[0] for p in pts], [p[1] * 1000 for p in pts], lw=1.0, label=f"{r['size_mb']} MB of state")
    for at, batch in MOVES:
        ax.axvline(at, color="grey", ls=":", lw=0.8)
        ax.text(at, ax.get_ylim()[1] * 0.9, " all at once" if batch is None else f" batches of {batch}", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("worst latency per 250 ms (ms)")
    ax.set_xlabel("seconds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, "migration.png")
