"""The chaos runner: randomized fault trials of a stateful job on local Spark, each checked
exactly (issue 21).

Each trial runs a job with sequence-numbered input (the integers 0..N-1, read slowly from two
splits) that keeps a running count per key (`x % 8`) and writes every update with `FileSink`;
the committed updates must be exactly `(k, 1) .. (k, count(k))` for every key: nothing lost,
nothing duplicated, nothing unexpected. Each trial injects one fault, drawn at random:

- `kill_worker`: SIGKILL of a random worker at a random moment, start-up included;
- `kill_after_checkpoint`: the same once a checkpoint completed (a restore from state);
- `kill_twice`: a SIGKILL, and another one as soon as the replacement process said hello
  (during recovery);
- `stall_worker`: SIGSTOP of a worker past the checkpoint timeout, so the checkpoint expires,
  the attempt fails and the stage is relaunched around the frozen process.
- `kill_in_async_write`: a worker dies inside a checkpoint's asynchronous write (fault point
  `checkpoint.write`, armed at a random moment after a checkpoint completed);
- `kill_in_commit`: a worker dies inside the sink's commit, a file of the epoch published and
  the notice not recorded (fault point `sink.commit`, armed likewise);
- `kill_in_restore`: a SIGKILL after a checkpoint, and the replacement worker that restores
  first dies inside the restore (fault point `restore.read`);
- `kill_driver`: the job runs in a child Python process (a driver with its own local Spark),
  which is SIGKILLed, with its process group, once a checkpoint completed; then the same job
  runs again here with `from_checkpoint="latest"` to the end. Any process of the dead driver
  left running (Spark's Python daemon has a process group of its own) is killed and counted.
- `drop_link`, `stall_link`, `partition`: the link between the two workers is reset mid-stream,
  one direction of it stalls past the checkpoint timeout, or both directions stop past it and
  then heal (`tests/network_chaos.py`: a fault relay at the socket layer between the workers);
- `corrupt_checkpoint`: the newest complete checkpoint's state files are corrupted once its
  epoch was committed, and a worker killed: the checkpoint is refused, the one before restored,
  and the refused epoch replayed at its cut (the sink skips it).

Fault points (`epochal.runtime.fault_points`) reach the workers through
`SparkContext.environment`: one fixed value per fault kind, so Spark keeps one worker daemon per
kind, and a marker file the runner holds (created) until the moment it arms the point (deletes).

    python tests/chaos.py --trials 24 --seed 1     # prints a Markdown table; --json FILE too

CI runs one trial of each kind (`tests/fault/test_chaos.py`); docs/reliability.md has the
figures of the latest long run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import network_chaos  # noqa: E402
from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment  # noqa: E402
from epochal.cluster.spark import SparkExecutor  # noqa: E402
from epochal.connectors import FileSink, read_committed  # noqa: E402
from epochal.runtime import fault_points  # noqa: E402
from epochal.runtime.master.control import JobControl  # noqa: E402
from epochal.testing import ListSource  # noqa: E402
from spark_jobs import complete_checkpoints, run_in_background, wait_until  # noqa: E402

FAULTS = (
    "kill_worker", "kill_after_checkpoint", "kill_twice", "stall_worker",
    "kill_in_async_write", "kill_in_commit", "kill_in_restore", "kill_driver",
    *network_chaos.KINDS,
)
POINTS = {"kill_in_async_write": "checkpoint.write", "kill_in_commit": "sink.commit", "kill_in_restore": "restore.read"}
RECORDS = 2_400
KEYS = 8
TIMEOUT = 1.5  # the checkpoint timeout: a stalled worker outlasts it
TOKEN_ENV = "EPOCHAL_CHAOS_DRIVER"  # marks every process of a child driver: its JVM and Python workers inherit it
# Where the armed points' markers live: fixed per runner process, so the value of
# EPOCHAL_FAULT_POINTS is fixed per kind and Spark starts one worker daemon per kind, not per trial.
MARKERS = os.path.join(tempfile.gettempdir(), f"epochal-chaos-markers-{os.getpid()}")


@dataclass(frozen=True)
class Trial:
    number: int
    fault: str
    lost: int
    duplicated: int
    unexpected: int
    restarts: int
    recovery_s: list[float]
    seconds: float
    fired: bool = True  # the fault happened (a fault point was reached, the driver was killed)
    resume_s: float | None = None  # kill_driver: the driver's SIGKILL → the resumed run's workers running
    strays: int = 0  # kill_driver: processes of the dead driver outside its process group
    error: str | None = None  # what the trial raised (a job that failed, a wait that timed out)

    @property
    def violations(self) -> int:
        return self.lost + self.duplicated + self.unexpected


def slow(x: int) -> int:
    time.sleep(0.002)  # about 2.5 s of input per worker: room for a fault mid-stream
    return x


def expected() -> collections.Counter[tuple[int, int]]:
    per_key = collections.Counter(x % KEYS for x in range(RECORDS))
    return collections.Counter((k, n) for k, c in per_key.items() for n in range(1, c + 1))


def job(spark: Any, out: str, ckpt: str) -> Any:
    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=16,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt, timeout=TIMEOUT),
        restart=RestartStrategy(max_restarts=4),
    )
    counts = env.from_source(ListSource(range(RECORDS), splits=2, batch_size=16)).map(slow)
    counts.key_by(lambda x: x % KEYS).count().sink_to(FileSink(out))
    return env.job_graph("chaos")


def _marker(fault: str) -> str:
    return os.path.join(MARKERS, POINTS[fault])


def _hold(fault: str) -> None:
    """Create the point's marker: the point does nothing until `_arm` deletes it."""
    os.makedirs(MARKERS, exist_ok=True)
    Path(_marker(fault)).touch()


def _arm(fault: str) -> None:
    os.remove(_marker(fault))


def _inject(fault: str, executor: SparkExecutor, control: JobControl, ckpt: str, rng: random.Random) -> None:
    def victim() -> int:
        return rng.choice(sorted(executor.worker_pids.values()))

    def checkpointed() -> None:
        wait_until(lambda: bool(complete_checkpoints(ckpt)), "a checkpoint completed")

    if fault == "kill_worker":
        time.sleep(rng.uniform(0.0, 2.5))
        os.kill(victim(), signal.SIGKILL)
    elif fault == "kill_after_checkpoint":
        checkpointed()
        time.sleep(rng.uniform(0.0, 1.0))
        os.kill(victim(), signal.SIGKILL)
    elif fault == "kill_twice":
        time.sleep(rng.uniform(0.2, 1.5))
        first = victim()
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: control.status().restarts >= 1, "the first kill was noticed")
        wait_until(lambda: first not in executor.worker_pids.values(), "the replacement said hello")
        time.sleep(rng.uniform(0.0, 0.5))  # during recovery, or just after it
        os.kill(victim(), signal.SIGKILL)
    elif fault == "stall_worker":
        time.sleep(rng.uniform(0.3, 1.5))
        pid = victim()
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: control.status().restarts >= 1, "the stall failed the attempt", 60)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)  # if Spark has not killed it with its stage already
            except ProcessLookupError:
                pass
    elif fault in ("kill_in_async_write", "kill_in_commit"):
        checkpointed()
        time.sleep(rng.uniform(0.0, 1.0))
        _arm(fault)  # the next checkpoint's write (its commit) dies
    elif fault == "kill_in_restore":
        checkpointed()
        time.sleep(rng.uniform(0.0, 1.0))
        _arm(fault)  # nothing restores until the kill: the relaunch's first restore dies
        os.kill(victim(), signal.SIGKILL)
    else:
        raise ValueError(fault)


def run_trial(spark: Any, number: int, fault: str, rng: random.Random, directory: str) -> Trial:
    if fault == "kill_driver":
        return run_driver_trial(spark, number, rng, directory)
    out, ckpt = os.path.join(directory, f"out{number}"), os.path.join(directory, f"ckpt{number}")
    graph = job(spark, out, ckpt)
    executor, control = SparkExecutor(spark), JobControl(graph.name, 2)
    started = time.monotonic()
    context = spark.sparkContext
    if fault in POINTS:  # read when each launch is submitted: this trial's workers have it
        _hold(fault)
        context.environment[fault_points.ENV] = f"{POINTS[fault]}:{MARKERS}"
    extra = network_chaos.environment(fault)
    context.environment.update(extra)
    fired = True
    try:
        thread, outcome = run_in_background(executor, graph, control)
        try:
            wait_until(lambda: len(executor.worker_pids) == 2 or not thread.is_alive(), "both workers said hello")
            if thread.is_alive() and fault in network_chaos.KINDS:
                fired = network_chaos.inject(fault, executor, control, ckpt, out, TIMEOUT, rng)
            elif thread.is_alive():
                _inject(fault, executor, control, ckpt, rng)
            thread.join(timeout=300)
        finally:
            if thread.is_alive():
                control.request_cancel()
                thread.join(timeout=60)
    finally:
        context.environment.pop(fault_points.ENV, None)
        for name in extra:
            context.environment.pop(name, None)
        # fired: the point made its marker again after `_arm` deleted it
        fired = fired and (fault not in POINTS or os.path.exists(_marker(fault)))
        if fault == "corrupt_checkpoint":  # and the corrupt checkpoint was refused at a restore: found
            # by the job master's verification before the restore (the result's refused checkpoints)
            # or, changed since, by the restoring task (an attempt's failure)
            result = outcome.get("result")
            said = [*control.status().failures, *(r.reason for r in getattr(result, "refused", ()))]
            fired = fired and any("checksum mismatch" in f for f in said)
        if fault in POINTS:
            _hold(fault)
    error = outcome.get("error")
    if error is not None and not isinstance(error, JobCancelledError):
        raise error
    return _checked(number, fault, out, control.status().restarts, executor.recovery_seconds, started, fired=fired)


def _checked(number: int, fault: str, out: str, restarts: int, recovery: list[float], started: float,
             **extra: Any) -> Trial:
    """The trial's committed output against what one failure-free run writes."""
    committed = collections.Counter(tuple(r) for r in read_committed(out))
    want = expected()
    return Trial(
        number, fault,
        lost=sum((want - committed).values()),
        duplicated=sum(n - 1 for item, n in committed.items() if item in want and n > 1),
        unexpected=sum(n for item, n in committed.items() if item not in want),
        restarts=restarts,
        recovery_s=list(recovery),
        seconds=time.monotonic() - started,
        **extra,
    )


# -- the driver killed ----------------------------------------------------------------------------
def _processes_of(token: str) -> list[int]:
    """The processes whose environment carries `TOKEN_ENV=token` (a driver's JVM, daemons, workers)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass  # gone, or not ours
    return found


def _kill_remains(token: str) -> int:
    """SIGKILL the process group of every process left of a killed driver; returns how many there were."""
    remains = _processes_of(token)
    for pid in remains:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until(lambda: not _processes_of(token), "the killed driver's processes are gone", 30)
    return len(remains)


def run_driver_trial(spark: Any, number: int, rng: random.Random, directory: str) -> Trial:
    """SIGKILL a driver (a child process with its own local Spark) after a checkpoint, then
    resume its job here from the latest checkpoint."""
    out, ckpt = os.path.join(directory, f"out{number}"), os.path.join(directory, f"ckpt{number}")
    token = uuid.uuid4().hex
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != fault_points.ENV}
    with open(os.path.join(directory, f"driver{number}.log"), "wb") as log:
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--driver", out, ckpt, "--master", MASTER],
            env={**env, TOKEN_ENV: token}, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: bool(complete_checkpoints(ckpt)) or child.poll() is not None, "a checkpoint completed", 180)
        time.sleep(rng.uniform(0.0, 1.0))
        if child.poll() is not None:
            raise AssertionError(f"the driver ended (exit {child.returncode}) before the kill: see driver{number}.log")
        os.killpg(child.pid, signal.SIGKILL)  # the driver, its JVM, and what else shares its group
        killed = time.monotonic()
        child.wait()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        strays = _kill_remains(token)  # Spark's Python daemon makes a process group of its own
    graph = job(spark, out, ckpt)
    executor, control = SparkExecutor(spark), JobControl(graph.name, 2)
    executor.execute(graph, "latest", control)
    running = next(t for event, t in executor.timeline if event == "running")
    return _checked(
        number, "kill_driver", out, control.status().restarts + 1, executor.recovery_seconds, started,
        resume_s=running - killed, strays=strays,
    )


MASTER = "local[2]"  # the trials' Spark master (`--master`); a killed driver's child uses the same


def set_master(master: str) -> None:
    global MASTER
    MASTER = master


def drive(out: str, ckpt: str) -> None:
    """The child of a `kill_driver` trial: the job, on a local Spark of its own."""
    from pyspark import cloudpickle

    from epochal.cluster.spark import create_session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark = create_session(MASTER)
    SparkExecutor(spark).execute(job(spark, out, ckpt))


def _pct(values: list[float], p: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(p * len(ordered)))]:.2f} s" if ordered else "-"


def summary(trials: list[Trial]) -> str:
    recoveries = [s for t in trials for s in t.recovery_s]
    resumes = [t.resume_s for t in trials if t.resume_s is not None]
    lines = [
        "| Fault | Trials | Fired | Restarts | Lost | Duplicated | Unexpected | Errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fault in FAULTS:
        of = [t for t in trials if t.fault == fault]
        if of:
            lines.append(
                f"| `{fault}` | {len(of)} | {sum(t.fired for t in of)} | {sum(t.restarts for t in of)} | "
                f"{sum(t.lost for t in of)} | {sum(t.duplicated for t in of)} | {sum(t.unexpected for t in of)} | "
                f"{sum(t.error is not None for t in of)} |"
            )
    lines += [
        "",
        f"{len(trials)} trials, {sum(t.violations for t in trials)} violations, "
        f"{sum(t.error is not None for t in trials)} errors. Recovery (failure noticed to every worker "
        f"running again), {len(recoveries)} recoveries: median {_pct(recoveries, 0.5)}, p90 "
        f"{_pct(recoveries, 0.9)}, max {_pct(recoveries, 1.0)}. Driver resumes (SIGKILL to the resumed "
        f"run's workers running, Spark already up), {len(resumes)}: median {_pct(resumes, 0.5)}, max "
        f"{_pct(resumes, 1.0)}; {sum(t.strays for t in trials)} processes of killed drivers outlived their "
        f"process group (killed). Trial length median {statistics.median(t.seconds for t in trials):.1f} s.",
    ]
    return "\n".join(lines)


def _trial(spark: Any, number: int, fault: str, rng: random.Random, directory: str) -> Trial:
    """A trial, or what it raised, as a trial with an error (the long set goes on)."""
    started = time.monotonic()
    try:
        return run_trial(spark, number, fault, rng, directory)
    except Exception as exc:  # noqa: BLE001 - reported in the summary, its directories kept
        return Trial(number, fault, 0, 0, 0, 0, [], time.monotonic() - started, fired=False, error=repr(exc)[:500])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Randomized fault trials of a stateful job on local Spark")
    parser.add_argument("--trials", type=int, default=len(FAULTS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the trials here")
    parser.add_argument("--workdir", help="the trials' directories (default: a new temporary one); those of "
                        "trials with a violation or an error are kept")
    parser.add_argument("--master", default=MASTER, help="the Spark master: local[2] (default) or, with an "
                        "executor JVM per worker, local-cluster[2,1,1024]")
    parser.add_argument("--driver", nargs=2, metavar=("OUT", "CKPT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    set_master(args.master)
    if args.driver:
        drive(*args.driver)
        return 0
    from pyspark import cloudpickle

    from epochal.cluster.spark import create_session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark = create_session(MASTER)
    rng = random.Random(args.seed)
    directory = args.workdir or tempfile.mkdtemp(prefix="epochal-chaos-")
    os.makedirs(directory, exist_ok=True)
    trials: list[Trial] = []
    try:
        for number in range(args.trials):
            fault = FAULTS[number % len(FAULTS)] if number < len(FAULTS) else rng.choice(FAULTS)
            trial = _trial(spark, number, fault, rng, directory)
            trials.append(trial)
            print(f"trial {number}: {fault}: {trial.violations} violations, {trial.restarts} restart(s), "
                  f"{trial.seconds:.1f} s{'' if trial.fired else ', did not fire'}"
                  f"{'' if trial.error is None else ', ERROR ' + trial.error}", file=sys.stderr, flush=True)
            if not trial.violations and trial.error is None:
                for name in (f"out{number}", f"ckpt{number}"):
                    shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
                Path(directory, f"driver{number}.log").unlink(missing_ok=True)
            if args.json:  # after every trial: a long run cut short keeps what it did
                Path(args.json).write_text(json.dumps([asdict(t) for t in trials], indent=1))
    finally:
        spark.stop()
        shutil.rmtree(MARKERS, ignore_errors=True)
    print(summary(trials))
    bad = [t.number for t in trials if t.violations or t.error is not None]
    if bad:
        print(f"trials {bad} kept in {directory}", file=sys.stderr)
    elif not args.workdir:
        shutil.rmtree(directory, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
