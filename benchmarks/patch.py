"""Latency a live logic patch adds (issue 37): a running job's function replaced at a checkpoint.

`elasticity`'s job and measuring sink: a keyed running count of 1,024 keys, parallelism 2, 1 s
checkpoints, paced open-loop at 50 % of its own maximum (probed first, unpaced), on Spark
`local[2]` (in-process with `--quick`). Two patches in turn: the stateless `map` that makes each
row, then the keyed `reduce`'s function (its state kept); each replaces the function by one that
computes the same, so the output stays what the measuring sink checks. Per patch: how long it
took (asked to answered: staged at every subtask, then the checkpoint that switched it complete)
and the worst latency from asked until the job caught up, against the steady worst before.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any

from . import elasticity, measuring_sink, soak
from .elasticity import Change, PacedSplit
from .runner import benchmark, pyplot, save_figure

LOAD = 0.5


def _row_v2(x: int) -> tuple[int, int, int]:
    """The patched row function: the same rows (the patch is what is measured, not new logic)."""
    return (x % soak.KEYS, 1, x)


def _last_v2(acc: Any, row: Any) -> tuple[int, int, int]:
    return (row[0], acc[1] + 1, row[2])


def _build(env: Any, source: Any, sink: Any) -> None:
    env.from_source(source).map(elasticity._row, name="row").key_by(soak._key).reduce(
        elasticity._last, name="last").sink_to(sink)


CHANGES = (Change("patch map (stateless)", lambda h: h.patch("row", _row_v2, timeout=900)),
           Change("patch reduce (keyed state kept)", lambda h: h.patch("last", _last_v2, timeout=900)))


def run_once(spark: Any, directory: str, rate: float) -> dict[str, Any]:
    lat = os.path.join(directory, "lat")
    os.makedirs(lat)
    start = time.time() + (8.0 if spark is not None else 2.0)  # the input is due from here
    env = elasticity.environment(spark, elasticity.PARALLEL, os.path.join(directory, "ckpt"))
    _build(env, PacedSplit(int(rate * 3600), rate, start), measuring_sink.MeasuringSink(lat, start, rate))
    return {"rate": rate, **elasticity.run_changes(env, "patch", start, lat, CHANGES)}


@benchmark("patch", "Live logic patches: latency a patch adds to a running job")
def run(quick: bool) -> dict[str, Any]:
    spark = None
    if not quick:
        from epochal.cluster.spark import create_session

        elasticity.ship(sys.modules[__name__])
        spark = create_session("local[2]")
    directory = tempfile.mkdtemp(prefix="epochal-patch-")
    try:
        top = elasticity.probe(spark, os.path.join(directory, "probe"), elasticity.PARALLEL, _build)
        outcome = run_once(spark, os.path.join(directory, "run"), LOAD * top)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out = {"host": "in-process" if quick else "spark local[2]", "max_records_per_s": top, "load": LOAD,
           "bucket_s": elasticity.BUCKET, "run": outcome}
    _plot(out)
    out["summary"] = _summary(out)
    return out


def _summary(result: dict[str, Any]) -> str:
    run = result["run"]
    lines = [
        f"`elasticity`'s keyed running count (1,024 keys, parallelism 2, 1 s checkpoints) on {result['host']}, "
        f"paced at {result['load']:.0%} of its maximum ({result['max_records_per_s']:,.0f} records/s unpaced): "
        "the `map` that makes each row patched, then the `reduce`'s function, each by one computing the same. "
        "Took: the patch asked until answered (staged at every subtask, then its checkpoint complete).",
        "",
        *elasticity.restarts_line([run]),
        f"| Records/s | Change | {elasticity.CHANGE_HEADER}",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *elasticity.change_rows(run, f"{run['rate']:,.0f}"),
        "",
        elasticity.GAP_NOTE,
        "",
        "![latency through two live patches](img/patch.png)",
    ]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    run = result["run"]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    ax.plot([t for t, _, _ in run["latency"]], [w * 1000 for _, _, w in run["latency"]], lw=1)
    for change in run["changes"]:
        ax.axvspan(change["asked"], change["answered"], color="tab:orange", alpha=0.3)
        ax.annotate(change["label"], (change["asked"], 0), fontsize=7, rotation=90, va="bottom")
    ax.set_xlabel("seconds from the start")
    ax.set_ylabel("worst latency per 250 ms (ms)")
    ax.set_title(f"live patches, {result['host']} (shaded: asked → answered)")
    fig.tight_layout()
    save_figure(fig, "patch.png")
