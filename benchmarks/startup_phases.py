"""Where a cold `epochal run` on Spark spends its time, and what `epochal serve` saves (issue 40).

Part of the `startup_recovery` benchmark. A small job file (a running word count over 2 x 200
lines of text, 2 workers, checkpoints every 0.3 s into a directory, FileSink output) is run the
way a user runs it:

- cold on Spark: `epochal run job.py` in a new process, cut into phases by timestamps the process
  takes (its CLOCK_MONOTONIC is the parent's: the spawn is on the same clock): the interpreter
  and its imports; the job file and the start checks; the driver's JVM; the SparkSession; the
  stage's scheduling up to its first task running (Spark's task launch, its Python worker, the
  job graph unpickled there); the rendezvous of the workers (every worker's hello and the peers'
  addresses, through the job master); the restore; the job's run; and the exit (the session
  stopped with its JVM);
- cold in-process: the same command with `--executor inprocess`;
- warm, on a service: `epochal run job.py --service URL` against a `JobService` on this
  process's session (warmed as `epochal serve` warms it): the client's whole run, and, on the
  service's side, the job's submit → every worker running.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

_JOB = """
import os
from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource

env = StreamEnvironment(parallelism=2, batch_size=64, checkpoint=CheckpointConfig(
    interval=0.3, directory="ckpt", existing="overwrite"))
(env.from_source(TextFileSource("corpus")).flat_map(str.split).key_by(lambda w: w).count()
    .sink_to(FileSink("out", mode="overwrite")))
if __name__ == "__main__":
    result = env.execute("tiny")
    print(f"tiny: {result.records_out:,} updates")
"""

# runs `epochal run` in this new process, timestamping its phases
_PROBE = """
import json, sys, time
marks = {"probe": time.monotonic()}
import epochal.cli.main as cli
marks["imported"] = time.monotonic()
from epochal.cluster import session, spark
executors = []
_jvm, _execute = session._start_quiet_jvm, spark.SparkExecutor.execute
def jvm(settings):
    marks["jvm began"] = time.monotonic()
    _jvm(settings)
    marks["jvm"] = time.monotonic()
def execute(self, *args, **kwargs):
    executors.append(self)
    return _execute(self, *args, **kwargs)
session._start_quiet_jvm, spark.SparkExecutor.execute = jvm, execute
code = cli.main(["run", "job.py", *sys.argv[1:]])
marks["returned"] = time.monotonic()
for name, at in (executors[0].timeline if executors else []):
    marks.setdefault(name, at)
print(json.dumps(marks))
sys.exit(code)
"""

# (label, from mark, to mark): the phases of a cold run on Spark, one after the other
PHASES = [
    ("interpreter and imports", "spawn", "imported"),
    ("job file and start checks", "imported", "checked"),
    ("driver JVM", "checked", "jvm"),
    ("SparkSession", "jvm", "session"),
    ("stage: submitted to first task running", "session", "task started"),
    ("rendezvous: every worker's hello and the peers' addresses", "task started", "connected"),
    ("restore: tasks open and restored", "connected", "running"),
    ("the job's run, to its final checkpoint", "running", "finished"),
    ("workers stopped, summary", "finished", "returned"),
    ("exit: session and JVM stopped", "returned", "exit"),
]


def _workdir() -> str:
    directory = tempfile.mkdtemp(prefix="epochal-phases-")
    os.makedirs(os.path.join(directory, "corpus"))
    for f in range(2):
        with open(os.path.join(directory, "corpus", f"f{f}.txt"), "w") as out:
            out.writelines(" ".join(f"w{(i * 7 + j) % 200}" for j in range(6)) + "\n" for i in range(200))
    with open(os.path.join(directory, "job.py"), "w") as job:
        job.write(textwrap.dedent(_JOB))
    return directory


def _cold(directory: str, *args: str) -> dict[str, float]:
    """One cold run: its marks, relative to the spawn, and `exit` (the process ended)."""
    spawn = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=directory, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ""})
    ended = time.monotonic()
    if done.returncode != 0:
        raise RuntimeError(f"the cold run failed:\n{done.stderr[-3000:]}")
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    return {"spawn": 0.0, **{k: v - spawn for k, v in marks.items()}, "exit": ended - spawn}


def cold_runs(reps: int) -> dict[str, Any]:
    """`reps` cold runs of each kind, interleaved: their phases' median seconds and the totals."""
    directory = _workdir()
    spark: list[dict[str, float]] = []
    inprocess: list[float] = []
    for _ in range(reps):
        spark.append(_cold(directory))
        inprocess.append(_cold(directory, "--executor", "inprocess")["exit"])
    phases = {label: statistics.median(r[b] - r[a] for r in spark) for label, a, b in PHASES}
    return {
        "phases_s": phases,
        "spark_total_s": _stats([r["exit"] for r in spark]),
        "inprocess_total_s": _stats(inprocess),
        "runs": reps,
    }


def service_runs(session: Any, reps: int) -> dict[str, Any]:
    """`reps` runs of the job through a `JobService` on `session`, after one to warm it."""
    from epochal.cli.service import JobService, warm_workers
    from epochal.cluster import spark

    directory = _workdir()
    warm_workers(session)
    service = JobService(session)
    executors: list[Any] = []
    execute = spark.SparkExecutor.execute

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        executors.append(self)
        return execute(self, *args, **kwargs)

    spark.SparkExecutor.execute = recorded  # type: ignore[method-assign]
    client, to_running = [], []
    try:
        for i in range(reps + 1):
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "epochal.cli.main", "run", "job.py", "--service",
                                   service.url, "--service-token", service.token], cwd=directory,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"the service's run failed:\n{done.stderr[-3000:]}")
            if i == 0:
                continue  # the first job imports the job's modules in the service
            client.append(time.monotonic() - started)
            marks = dict(executors[-1].timeline)
            to_running.append(marks["running"] - marks["execute"])
    finally:
        spark.SparkExecutor.execute = execute  # type: ignore[method-assign]
        service.close()
    return {"client_total_s": _stats(client), "submit_to_running_s": _stats(to_running), "runs": reps}


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def markdown(cold: dict[str, Any], service: dict[str, Any]) -> str:
    """The report's part: the cold run's phases, and the service's warm runs."""
    total = cold["spark_total_s"]["median"]
    rows = ["| phase of a cold `epochal run` on Spark | median s | share |", "|---|---:|---:|"]
    for label, seconds in cold["phases_s"].items():
        rows.append(f"| {label} | {seconds:.2f} | {seconds / total:.0%} |")
    rows.append(f"| **process start → exit** | **{total:.2f}** | |")
    s, c, p = cold["spark_total_s"], service["client_total_s"], service["submit_to_running_s"]
    i = cold["inprocess_total_s"]
    return (
        "\n".join(rows) + "\n\n"
        f"The same job file: `epochal run --executor inprocess` takes {i['median']:.2f} s "
        f"({i['min']:.2f}–{i['max']:.2f}) from process start to exit; cold on Spark {s['median']:.2f} s "
        f"({s['min']:.2f}–{s['max']:.2f}); sent to `epochal serve` (`epochal run job.py --service URL`) "
        f"{c['median']:.2f} s ({c['min']:.2f}–{c['max']:.2f}) in all for the client, of which the service "
        f"took {p['median']:.2f} s ({p['min']:.2f}–{p['max']:.2f}) from the job's submit to every worker running "
        f"({cold['runs']} cold runs of each kind, interleaved; {service['runs']} warm runs).\n"
    )
