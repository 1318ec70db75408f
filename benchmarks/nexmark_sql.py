"""Nexmark in SQL beside DataStream: each query of examples/nexmark/ that has an SQL version in
examples/nexmark/sql/ (`env.sql`), both in-process on the same Parquet files, one worker.

The `nexmark` benchmark measures the same pairs inside its full run (beside Spark SS and Flink's
figures, at 5 M events, about an hour here); this one measures only the SQL/DataStream pairs, so
the cost of the SQL layer can be read after a change in minutes. The load average of the machine
during the run is recorded (2 shared cores: compare only figures of one run).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from .nexmark import QUERIES_DIR, _k, _per_core, _ratio, measure
from .runner import benchmark


def sql_queries() -> list[str]:
    """The queries with an SQL version, by N."""
    names = [f[:-3] for f in os.listdir(os.path.join(QUERIES_DIR, "sql")) if f.startswith("q") and f.endswith(".py")]
    return sorted(names, key=lambda n: int(n[1:]))


@benchmark("nexmark_sql", "Nexmark in SQL: env.sql beside the DataStream versions, events/s per core")
def run(quick: bool) -> dict[str, Any]:
    events = 200_000 if quick else 1_000_000
    directory = tempfile.mkdtemp(prefix="epochal-nexmark-sql-")
    try:
        load_before = os.getloadavg()
        result = measure(events, directory, spark=False, reps=2, only=sql_queries())
        result["load_before"] = load_before
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result["summary"] = summary(result)
    return result


def summary(result: dict[str, Any]) -> str:
    load = ", ".join(f"{x:.1f}" for x in result["load"])
    lines = [f"{result['events']:,} events read from Parquet files, in-process, one worker, best of "
             f"{result['reps']}; 1-, 5-, 15-minute load average at the end: {load} (2 cores shared with "
             "other engineers' tests: the ratio is the figure to read, not the rates).", "",
             "| query | DataStream /core | SQL /core | SQL ÷ DataStream | results (DataStream / SQL) |",
             "|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if not r.get("epochal_sql"):
            continue
        sql_rate = _per_core(r, "epochal_sql")
        lines.append(f"| {r['query']} | {_k(_per_core(r, 'epochal'))} | {_k(sql_rate)} | "
                     f"{_ratio(sql_rate, _per_core(r, 'epochal'))} | "
                     f"{r['epochal']['results']:,} / {r['epochal_sql']['results']:,} |")
    lines += ["", "Queries:", ""] + [f"- {r['query']}: {r['description']}" for r in result["rows"]]
    return "\n".join(lines)
