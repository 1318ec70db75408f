"""Scale: what grows with the number of subtasks, in-process and on Spark (issue 42).

In-process, the issue's word count (200,000 lines, 0.5 s checkpoints, `count(emit=
"on_checkpoint")` into a sink that discards) at parallelism 1 to 256, every task on one thread:
run time and CPU, checkpoint duration and its parts (`scale_points.manifest_stats`), files and
bytes per checkpoint (merged files, and at two parallelisms the files unmerged), channels and
memory. The target: at parallelism 128, run time within 2x and checkpoint duration within 3x of
parallelism 8, on the same input and in the same run. The per-key-group costs: the same job at
parallelism 8 with 128, 1,024 and 32,768 key groups.

On Spark, `local-cluster` with as many worker processes as these two cores and their memory
take (a `local-cluster[2,C,MB]` of two executor JVMs with C task slots each: a slot is an Epochal
worker process), a keyed count fed slowly so that the cores are not the limit: run time against
the input's own duration, checkpoint duration and parts, the barrier stage's rendezvous (stage
submitted to every worker running), the job master's CPU (its thread's, and the coordinator's
share per checkpoint), and each worker's memory and TCP links, sampled from /proc.

Every point runs in a fresh process (memory is per run); the machine's load is recorded with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from .runner import ROOT, benchmark
from .scale_report import plot, summary
from .spark_subprocess import run_on_spark

PARALLELISMS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
UNMERGED = (8, 128)  # parallelisms also run with a file per subtask and operator
GROUPS = (128, 1_024, 32_768)  # key groups of the per-group runs, at parallelism 8
SPARK_MASTER = "local-cluster[2,16,2048]"  # 32 task slots in two executor JVMs
SPARK_WORKERS = (2, 4, 8, 16, 32)
BASELINE = 8
TARGET_RUN, TARGET_CHECKPOINT = 2.0, 3.0  # at parallelism 128, against BASELINE

_CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
from benchmarks.scale_points import inprocess_point
print("RESULT " + json.dumps(inprocess_point(**json.loads({kwargs!r}))))
"""


def _load() -> float:
    return os.getloadavg()[0]


def inprocess(timeout: float = 1800, **kwargs: Any) -> dict[str, Any]:
    """`scale_points.inprocess_point(**kwargs)` in a child process, with the load around it."""
    load = _load()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=ROOT, kwargs=json.dumps(kwargs))],
        capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")),
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"scale point {kwargs} failed:\n{out.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    result["load"] = [load, _load()]
    return result


@benchmark("scale", "Scale: parallelism 1 to 256 in-process, and worker processes on Spark")
def run(quick: bool) -> dict[str, Any]:
    lines = 20_000 if quick else int(os.environ.get("EPOCHAL_SCALE_LINES", 200_000))
    parallelisms = (1, 8, 32) if quick else PARALLELISMS
    interval = 0.5
    rounds = 1 if quick else 2
    points: list[dict[str, Any]] = []
    for round_ in range(rounds):  # rounds alternate the order: a drifting load favours no parallelism
        order = parallelisms if round_ % 2 == 0 else tuple(reversed(parallelisms))
        points.extend(inprocess(parallelism=p, lines=lines, interval=interval) for p in order)
    unmerged = [inprocess(parallelism=p, lines=lines, interval=interval, merge_files=False)
                for p in (UNMERGED if not quick else (8,))]
    groups = [inprocess(parallelism=BASELINE if not quick else 2, lines=lines, interval=interval, max_parallelism=g)
              for g in GROUPS]
    spark: list[dict[str, Any]] = []
    if not quick and os.environ.get("EPOCHAL_SCALE_SPARK", "1") != "0":
        spark = run_on_spark(SPARK_MASTER, "benchmarks.scale_points", "spark_sweep", timeout=5400,
                             workers=list(SPARK_WORKERS), seconds=20.0, rate=20_000, interval=1.0)
    result = {
        "lines": lines, "interval": interval, "rounds": rounds, "baseline": BASELINE,
        "targets": {"run": TARGET_RUN, "checkpoint": TARGET_CHECKPOINT},
        "points": points, "unmerged": unmerged, "groups": groups,
        "spark": spark, "spark_master": SPARK_MASTER if spark else None,
    }
    plot(result)
    result["summary"] = summary(result)
    return result
