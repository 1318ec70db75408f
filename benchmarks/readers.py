"""Each file source's reader against pyarrow's own reader of that format, on one core.

The sources read a file as splits and hand out batches (1,024 records, the environment's
default), keeping a position for every batch; pyarrow's readers read each file whole, on one
thread. The same files for both, best of several runs, rows/s: what the replayable, splittable
reading costs next to the plain library call a user would otherwise make (issue 19: "measure
lines/s against pyarrow's own CSV/JSON readers in one run").
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from .runner import benchmark, pyplot, save_figure

BATCH = 1024
FILES = 4


def write_files(directory: str, rows: int, seed: int = 23) -> dict[str, str]:
    """The same records as JSON lines, CSV (with a header), Parquet and plain text lines."""
    rng = random.Random(seed)
    per_file = rows // FILES
    dirs = {fmt: os.path.join(directory, fmt) for fmt in ("jsonl", "csv", "parquet", "text")}
    for d in dirs.values():
        os.makedirs(d)
    for f in range(FILES):
        records = {
            "id": list(range(f * per_file, (f + 1) * per_file)),
            "user": [f"user{rng.randrange(50_000)}" for _ in range(per_file)],
            "amount": [rng.randrange(100_000) / 100 for _ in range(per_file)],
            "country": [rng.choice(("de", "fr", "us", "jp", "br")) for _ in range(per_file)],
        }
        table = pa.table(records)
        with open(os.path.join(dirs["jsonl"], f"part-{f}.jsonl"), "w") as out:
            out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in table.to_pylist())
        pcsv.write_csv(table, os.path.join(dirs["csv"], f"part-{f}.csv"))
        pq.write_table(table, os.path.join(dirs["parquet"], f"part-{f}.parquet"), row_group_size=128 * 1024)
        with open(os.path.join(dirs["text"], f"part-{f}.txt"), "w") as out:
            out.writelines(f"{u} {c} {a}\n" for u, c, a in zip(records["user"], records["country"], records["amount"]))
    return dirs


def source_rows(source: Any) -> int:
    """Every row of `source`, read split by split through its readers, as a job reads them."""
    rows = 0
    for split in source.splits():
        reader = source.open_split(split, None)
        while (batch := reader.read(BATCH)) is not None:
            rows += batch.num_rows
        reader.close()
    return rows


def _files(directory: str) -> list[str]:
    return [os.path.join(directory, f) for f in sorted(os.listdir(directory))]


def contenders(dirs: dict[str, str]) -> dict[str, dict[str, Callable[[], int]]]:
    """Per format: our source's reader and pyarrow's reader, each a function giving rows read."""
    from epochal.connectors import CsvSource, JsonLinesSource, ParquetSource, TextFileSource

    schema = pa.schema([("id", pa.int64()), ("user", pa.string()), ("amount", pa.float64()), ("country", pa.string())])
    one_thread_csv = pcsv.ReadOptions(use_threads=False)
    return {
        "JSON lines": {
            "epochal": lambda: source_rows(JsonLinesSource(dirs["jsonl"], schema=schema)),
            "pyarrow": lambda: sum(
                pjson.read_json(p, read_options=pjson.ReadOptions(use_threads=False),
                                parse_options=pjson.ParseOptions(explicit_schema=schema)).num_rows
                for p in _files(dirs["jsonl"])
            ),
        },
        "CSV": {
            "epochal": lambda: source_rows(CsvSource(dirs["csv"], schema=schema)),
            "pyarrow": lambda: sum(
                pcsv.read_csv(p, read_options=one_thread_csv,
                              convert_options=pcsv.ConvertOptions(column_types=schema)).num_rows
                for p in _files(dirs["csv"])
            ),
        },
        "Parquet": {
            "epochal": lambda: source_rows(ParquetSource(dirs["parquet"])),
            "pyarrow": lambda: sum(pq.read_table(p, use_threads=False).num_rows for p in _files(dirs["parquet"])),
        },
        "text lines": {
            "epochal": lambda: source_rows(TextFileSource(dirs["text"])),
            "pyarrow": lambda: sum(
                pcsv.read_csv(p, read_options=pcsv.ReadOptions(use_threads=False, column_names=["line"]),
                              parse_options=pcsv.ParseOptions(delimiter="\x1f", quote_char=False)).num_rows
                for p in _files(dirs["text"])
            ),
        },
    }


def measure(fn: Callable[[], int], reps: int) -> dict[str, float]:
    best, rows = float("inf"), 0
    for _ in range(reps):
        started = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - started)
    return {"rows": rows, "seconds": best, "rows_per_s": rows / best}


@benchmark("readers", "Each file source against pyarrow's own reader, one core")
def run(quick: bool) -> dict[str, Any]:
    rows = 40_000 if quick else int(os.environ.get("EPOCHAL_READER_ROWS", 2_000_000))
    reps = 2 if quick else 5
    directory = tempfile.mkdtemp(prefix="epochal-readers-")
    try:
        dirs = write_files(directory, rows)
        sizes = {fmt: sum(os.path.getsize(p) for p in _files(d)) for fmt, d in dirs.items()}
        results: dict[str, Any] = {}
        for fmt, pair in contenders(dirs).items():
            results[fmt] = {who: measure(fn, reps) for who, fn in pair.items()}  # alternating formats
            if results[fmt]["epochal"]["rows"] != results[fmt]["pyarrow"]["rows"]:
                raise RuntimeError(f"{fmt}: the two readers read different row counts")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result: dict[str, Any] = {"rows": rows, "reps": reps, "batch": BATCH, "results": results, "bytes": sizes}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    lines = [
        f"{result['rows']:,} records (`id`, `user`, `amount`, `country`) in {FILES} files per format, read "
        f"on one core: our source's reader, all splits, batches of {result['batch']:,} (as a job reads "
        "them, a position kept per batch), against pyarrow's reader of that format reading each file "
        f"whole on one thread (JSON and CSV with the same explicit schema); best of {result['reps']}.",
        "",
        "| Format | Epochal rows/s | pyarrow rows/s | Epochal / pyarrow |",
        "|---|---:|---:|---:|",
    ]
    for fmt, pair in result["results"].items():
        ours, theirs = pair["epochal"]["rows_per_s"], pair["pyarrow"]["rows_per_s"]
        lines.append(f"| {fmt} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}× |")
    lines += ["", "![Rows per second by reader](img/readers.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    formats = list(result["results"])
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.38
    for i, who in enumerate(("epochal", "pyarrow")):
        values = [result["results"][f][who]["rows_per_s"] / 1e6 for f in formats]
        ax.bar([x + (i - 0.5) * width for x in range(len(formats))], values, width, label=who)
    ax.set_xticks(range(len(formats)), formats)
    ax.set_ylabel("million rows/s (one core)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, "readers")
