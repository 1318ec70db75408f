"""Start-up and recovery times of the Spark host (issue: run on Spark).

- cold start: a new process → every worker of a job running (session start included);
- warm start: a job on a live SparkContext, submit → every worker running;
- in-place recovery: a UDF raises → every worker restored and running again (no Spark work);
- relaunch recovery: a worker process SIGKILLed → a new barrier stage restored and running.
"Running" means the tasks are open and restored: the next step processes records.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from .runner import ROOT, benchmark, pyplot, save_figure

_COLD_SCRIPT = r"""
import time, json, sys
t0 = time.monotonic()
sys.path.insert(0, {root!r})
from benchmarks.startup_recovery import tiny_env, _ship
from epochal.cluster.spark import SparkExecutor, default_session
session = default_session(2)
t_session = time.monotonic()
_ship()
ex = SparkExecutor(session)
ex.execute(tiny_env({tmp!r}).job_graph("cold"))
ev = dict(ex.timeline)
print(json.dumps({{"session": t_session - t0, "running": ev["running"] - t0, "finished": ev["finished"] - t0}}))
"""


def _ship() -> None:
    """Let Spark workers unpickle this module's functions without importing `benchmarks`."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _corpus(directory: str, lines: int) -> str:
    corpus = os.path.join(directory, f"corpus{lines}")
    if not os.path.exists(corpus):
        os.makedirs(corpus)
        rng = random.Random(3)
        for f in range(2):
            with open(os.path.join(corpus, f"f{f}.txt"), "w") as out:
                for _ in range(lines):
                    out.write(" ".join(f"w{rng.randrange(200)}" for _ in range(6)) + "\n")
    return corpus


def tiny_env(tmp: str, *, slow: float = 0.0, fail_marker: str | None = None, run: str = "") -> Any:
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.connectors import FileSink, TextFileSource

    def split(line: str) -> list[str]:
        if slow:
            time.sleep(slow)
        if fail_marker is not None and "w7 " in line and os.path.exists(fail_marker + ".armed"):
            os.remove(fail_marker + ".armed")
            raise ValueError("injected failure")
        return line.split()

    corpus = _corpus(tmp, 1500 if slow else 200)
    env = StreamEnvironment(
        parallelism=2, batch_size=64,
        checkpoint=CheckpointConfig(interval=0.3, directory=os.path.join(tmp, f"ckpt{run}")),
    )
    (env.from_source(TextFileSource(corpus)).flat_map(split).key_by(lambda w: w).count()
        .sink_to(FileSink(os.path.join(tmp, f"out{run}"))))
    return env


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _wait_checkpoint(ckpt: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.isdir(ckpt) and any(
            os.path.exists(os.path.join(ckpt, d, "MANIFEST.json")) for d in os.listdir(ckpt)
        ):
            return
        time.sleep(0.01)
    raise RuntimeError("no checkpoint completed")


@benchmark("startup_recovery", "Start-up and recovery on local Spark")
def run(quick: bool) -> dict[str, Any]:
    from epochal.cluster.spark import SparkExecutor, default_session

    reps = 2 if quick else 5
    tmp = tempfile.mkdtemp(prefix="epochal-bench-")
    cold: list[dict[str, float]] = []
    for _ in range(1 if quick else 3):
        out = subprocess.run(
            [sys.executable, "-c", _COLD_SCRIPT.format(root=ROOT, tmp=tempfile.mkdtemp(prefix="epochal-cold-"))],
            capture_output=True, text=True, check=True,
        )
        cold.append(json.loads(out.stdout.strip().splitlines()[-1]))

    session = default_session(2)
    _ship()
    warm, in_place, relaunch = [], [], []
    for i in range(reps):
        ex = SparkExecutor(session)
        ex.execute(tiny_env(tmp, run=f"w{i}").job_graph("warm"))
        ev = dict(ex.timeline)
        warm.append(ev["running"] - ev["submitted"])

        marker = os.path.join(tmp, f"fail{i}")
        open(marker + ".armed", "w").close()
        ex = SparkExecutor(session)
        ex.execute(tiny_env(tmp, slow=0.001, fail_marker=marker, run=f"f{i}").job_graph("in-place"))
        in_place.append(ex.recovery_seconds[0])

        ex = SparkExecutor(session)
        env = tiny_env(tmp, slow=0.002, run=f"k{i}")
        errors: list[BaseException] = []

        def execute(ex: Any = ex, env: Any = env, errors: list[BaseException] = errors) -> None:
            try:
                ex.execute(env.job_graph("relaunch"))
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        thread = threading.Thread(target=execute)
        thread.start()
        _wait_checkpoint(os.path.join(tmp, f"ckptk{i}"))
        killed_at = time.monotonic()
        os.kill(ex.worker_pids[0], signal.SIGKILL)
        thread.join()
        if errors:
            raise errors[0]
        back = [t for name, t in ex.timeline if name == "running" and t > killed_at]
        if not back:
            raise RuntimeError(f"no recovery after the kill: {ex.timeline} (killed at {killed_at})")
        relaunch.append(back[0] - killed_at)

    result = {
        "host": "spark local[2]",
        "cold_start_to_running_s": _stats([c["running"] for c in cold]),
        "cold_session_start_s": _stats([c["session"] for c in cold]),
        "warm_start_to_running_s": _stats(warm),
        "in_place_recovery_s": _stats(in_place),
        "relaunch_recovery_s": _stats(relaunch),
    }
    _plot(result)
    rows = [
        ("cold start: process start → workers running", "cold_start_to_running_s"),
        ("  of which: SparkSession start", "cold_session_start_s"),
        ("warm start: submit on a live context → running", "warm_start_to_running_s"),
        ("UDF exception → restored in place, running", "in_place_recovery_s"),
        ("worker SIGKILL → relaunched, restored, running", "relaunch_recovery_s"),
    ]
    lines = ["| phase | median s | min s | max s | runs |", "|---|---:|---:|---:|---:|"]
    for label, key in rows:
        s = result[key]
        lines.append(f"| {label} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} | {s['n']} |")
    result["summary"] = (
        "Host: Spark `local[2]`, 2 workers, `spark.python.task.killTimeout=200ms`.\n\n"
        + "\n".join(lines)
        + "\n\n![start-up and recovery](img/startup_recovery.png)\n\n"
        "In-place recovery needs no Spark work: the workers keep their Spark tasks and rebuild "
        "their operators from the latest checkpoint. A dead worker fails the barrier stage, which "
        "Spark does not retry, so the job master cancels it and submits a new one; most of that "
        "time is Spark's task scheduling and the barrier rendezvous (`allGather`, about 1 s).\n"
    )
    return result


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    keys = [
        ("cold start", "cold_start_to_running_s"),
        ("warm start", "warm_start_to_running_s"),
        ("in-place\nrecovery", "in_place_recovery_s"),
        ("relaunch\nrecovery", "relaunch_recovery_s"),
    ]
    med = [result[k]["median"] for _, k in keys]
    low = [result[k]["median"] - result[k]["min"] for _, k in keys]
    high = [result[k]["max"] - result[k]["median"] for _, k in keys]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar([label for label, _ in keys], med, yerr=[low, high], capsize=4, color="#4C72B0")
    ax.set_ylabel("seconds (median, min–max)")
    ax.set_title("Epochal on Spark local[2]: start-up and recovery")
    fig.tight_layout()
    save_figure(fig, "startup_recovery.png")
