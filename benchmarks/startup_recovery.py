"""Start-up and recovery times of the Spark host (issue: run on Spark), on a classic session and
on a Spark Connect session (`remote("local[*]")`, issue 22), and where a cold `epochal run`
spends its time against a warm `epochal serve` (issue 40, `benchmarks.startup_phases`):

- cold start: a new process → every worker of a job running (session start included);
- warm start: a job on a live session, submit → every worker running;
- in-place recovery: a UDF raises → every worker restored and running again (no Spark work);
- relaunch recovery: a worker process SIGKILLed → a new barrier stage restored and running.
"Running" means the tasks are open and restored: the next step processes records. One process
cannot hold both kinds of local session, so the Connect loop runs in a process of its own (as
every cold start does), after the classic session has stopped.
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

from . import startup_phases
from .runner import ROOT, benchmark, pyplot, save_figure

_COLD_SCRIPT = r"""
import time, json, sys
t0 = time.monotonic()
sys.path.insert(0, {root!r})
from benchmarks.startup_recovery import tiny_env, _ship
from epochal.cluster.spark import SparkExecutor, create_session, default_session
session = create_session("local[*]", connect=True) if {connect} else default_session(2)
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


_CONNECT_SCRIPT = r"""
import json, sys
sys.path.insert(0, {root!r})
from benchmarks.startup_recovery import _measure, _ship
from epochal.cluster.spark import create_session
session = create_session("local[*]", connect=True)
_ship()
print(json.dumps(_measure(session, {tmp!r}, {reps})))
"""


def _last_json(script: str) -> Any:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure(session: Any, tmp: str, reps: int) -> dict[str, list[float]]:
    """Warm start, in-place recovery and relaunch recovery, `reps` times each, on `session`."""
    from epochal.cluster.spark import SparkExecutor

    warm: list[float] = []
    in_place: list[float] = []
    relaunch: list[float] = []
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
    return {"warm": warm, "in_place": in_place, "relaunch": relaunch}


def _phases(cold: list[dict[str, float]], measured: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "cold_start_to_running_s": _stats([c["running"] for c in cold]),
        "cold_session_start_s": _stats([c["session"] for c in cold]),
        "warm_start_to_running_s": _stats(measured["warm"]),
        "in_place_recovery_s": _stats(measured["in_place"]),
        "relaunch_recovery_s": _stats(measured["relaunch"]),
    }


_ROWS = [
    ("cold start: process start → workers running", "cold_start_to_running_s"),
    ("  of which: SparkSession start", "cold_session_start_s"),
    ("warm start: submit on a live session → running", "warm_start_to_running_s"),
    ("UDF exception → restored in place, running", "in_place_recovery_s"),
    ("worker SIGKILL → relaunched, restored, running", "relaunch_recovery_s"),
]


@benchmark("startup_recovery", "Start-up and recovery on local Spark, classic and Spark Connect")
def run(quick: bool) -> dict[str, Any]:
    from epochal.cluster.spark import default_session

    reps = 2 if quick else 5
    load_before = os.getloadavg()[0]  # the 2 cores are shared: how busy the machine was says what figures mean
    tmp = tempfile.mkdtemp(prefix="epochal-bench-")
    cold: dict[str, list[dict[str, float]]] = {"classic": [], "connect": []}
    for _ in range(1 if quick else 3):  # the two kinds in turn, so that drift in load hits both
        for kind in cold:
            script = _COLD_SCRIPT.format(root=ROOT, tmp=tempfile.mkdtemp(prefix="epochal-cold-"),
                                         connect=kind == "connect")
            cold[kind].append(_last_json(script))

    phases = startup_phases.cold_runs(1 if quick else 3)  # before this process holds a session
    session = default_session(2)
    _ship()
    classic = _measure(session, tmp, reps)
    service = startup_phases.service_runs(session, reps)
    session.stop()  # one local driver at a time: the Connect server's process starts its own
    connect = _last_json(_CONNECT_SCRIPT.format(root=ROOT, tmp=tempfile.mkdtemp(prefix="epochal-connect-"),
                                                reps=reps))

    result: dict[str, Any] = {
        "host": "spark local[2]",
        **_phases(cold["classic"], classic),  # the classic figures keep their keys
        "connect": {"host": "spark connect, remote(local[*]) on 2 cores", **_phases(cold["connect"], connect)},
        "cold_run_phases": phases,
        "service": service,
        "load_average": [load_before, os.getloadavg()[0]],
    }
    _plot(result)
    lines = [
        "| phase | classic: median s (min–max) | Spark Connect: median s (min–max) | runs |",
        "|---|---:|---:|---:|",
    ]
    for label, key in _ROWS:
        a, b = result[key], result["connect"][key]
        lines.append(
            f"| {label} | {a['median']:.2f} ({a['min']:.2f}–{a['max']:.2f}) "
            f"| {b['median']:.2f} ({b['min']:.2f}–{b['max']:.2f}) | {a['n']} |"
        )
    result["summary"] = (
        f"Load average {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end of the run, on 2 cores "
        "(other work shares them: the start-up figures grow with it; compare within the run).\n\n"
        "Host: Spark `local[2]` (`local[*]` on 2 cores), 2 workers, `spark.python.task.killTimeout=200ms`; "
        "classic: a SparkSession in the job's process; Spark Connect: `SparkSession.builder.remote(\"local[*]\")`, "
        "a Connect server in the job's process and the job master in its client.\n\n"
        + "\n".join(lines)
        + "\n\n![start-up and recovery](img/startup_recovery.png)\n\n"
        "In-place recovery needs no Spark work: the workers keep their Spark tasks and rebuild "
        "their operators from the latest checkpoint. A SIGKILLed worker process is replaced inside "
        "its Spark task (`cluster/supervisor.py`) and the attempt restarts in place; a lost Spark "
        "task fails the barrier stage, which Spark does not retry, so the job master submits a new "
        "one. A stage's workers meet through the job master (their hellos and the peers' addresses "
        "on their control links), not the barrier context's `allGather`, which took about a second "
        "(the JVM polls once a second). "
        "Through Connect the stage is a DataFrame's `mapInArrow(barrier=True)`, planned by the "
        "server, and the session start includes the Connect server and the client's connection.\n\n"
        "Where a cold `epochal run job.py` spends its time, for a job that takes about a second of its "
        "own, and the same job file sent to a warm `epochal serve`:\n\n"
        + startup_phases.markdown(phases, service)
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
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    width = 0.38
    for offset, (label, figures, color) in enumerate(
        [("classic", result, "#4C72B0"), ("Spark Connect", result["connect"], "#DD8452")]
    ):
        med = [figures[k]["median"] for _, k in keys]
        low = [figures[k]["median"] - figures[k]["min"] for _, k in keys]
        high = [figures[k]["max"] - figures[k]["median"] for _, k in keys]
        xs = [i + (offset - 0.5) * width for i in range(len(keys))]
        ax.bar(xs, med, width, yerr=[low, high], capsize=3, color=color, label=label)
    ax.set_xticks(range(len(keys)), [label for label, _ in keys])
    ax.set_ylabel("seconds (median, min–max)")
    ax.set_title("Epochal on Spark local[2]: start-up and recovery")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, "startup_recovery.png")
