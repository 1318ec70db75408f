"""The chaos runner: randomized fault trials of a stateful job on local Spark, each checked
exactly (issue 21). A first version: the faults that need no hook inside Epochal.

Each trial runs a job with sequence-numbered input (the integers 0..N-1, read slowly from two
splits) that keeps a running count per key (`x % 8`) and writes every update with `FileSink`;
the committed updates must be exactly `(k, 1) .. (k, count(k))` for every key: nothing lost,
nothing duplicated, nothing unexpected. Each trial injects one fault, drawn at random:

- `kill_worker`: SIGKILL of a random worker at a random moment, start-up included;
- `kill_after_checkpoint`: the same once a checkpoint completed (a restore from state);
- `kill_twice`: a SIGKILL, and another one as soon as the job runs again (during recovery);
- `stall_worker`: SIGSTOP of a worker past the checkpoint timeout, so the checkpoint expires,
  the attempt fails and the stage is relaunched around the frozen process.

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
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment  # noqa: E402
from epochal.cluster.spark import SparkExecutor  # noqa: E402
from epochal.connectors import FileSink, read_committed  # noqa: E402
from epochal.runtime.control import JobControl  # noqa: E402
from epochal.testing import ListSource  # noqa: E402
from spark_jobs import run_in_background, wait_until  # noqa: E402

FAULTS = ("kill_worker", "kill_after_checkpoint", "kill_twice", "stall_worker")
RECORDS = 2_400
KEYS = 8
TIMEOUT = 1.5  # the checkpoint timeout: a stalled worker outlasts it


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


def _inject(fault: str, executor: SparkExecutor, control: JobControl, ckpt: str, rng: random.Random) -> None:
    def victim() -> int:
        return rng.choice(sorted(executor.worker_pids.values()))

    if fault == "kill_worker":
        time.sleep(rng.uniform(0.0, 2.5))
        os.kill(victim(), signal.SIGKILL)
    elif fault == "kill_after_checkpoint":
        wait_until(lambda: bool(list(Path(ckpt).glob("chk-*/MANIFEST.json"))), "a checkpoint completed")
        time.sleep(rng.uniform(0.0, 1.0))
        os.kill(victim(), signal.SIGKILL)
    elif fault == "kill_twice":
        time.sleep(rng.uniform(0.2, 1.5))
        first = set(executor.worker_pids.values())
        os.kill(victim(), signal.SIGKILL)
        wait_until(lambda: control.status().restarts >= 1, "the first kill was noticed")
        wait_until(lambda: not first & set(executor.worker_pids.values()), "the relaunched workers said hello")
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
    else:
        raise ValueError(fault)


def run_trial(spark: Any, number: int, fault: str, rng: random.Random, directory: str) -> Trial:
    out, ckpt = os.path.join(directory, f"out{number}"), os.path.join(directory, f"ckpt{number}")
    graph = job(spark, out, ckpt)
    executor, control = SparkExecutor(spark), JobControl(graph.name, 2)
    started = time.monotonic()
    thread, outcome = run_in_background(executor, graph, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2 or not thread.is_alive(), "both workers said hello")
        if thread.is_alive():
            _inject(fault, executor, control, ckpt, rng)
        thread.join(timeout=300)
    finally:
        if thread.is_alive():
            control.request_cancel()
            thread.join(timeout=60)
    error = outcome.get("error")
    if error is not None and not isinstance(error, JobCancelledError):
        raise error
    committed = collections.Counter(tuple(r) for r in read_committed(out))
    want = expected()
    return Trial(
        number, fault,
        lost=sum((want - committed).values()),
        duplicated=sum(n - 1 for item, n in committed.items() if item in want and n > 1),
        unexpected=sum(n for item, n in committed.items() if item not in want),
        restarts=control.status().restarts,
        recovery_s=list(executor.recovery_seconds),
        seconds=time.monotonic() - started,
    )


def summary(trials: list[Trial]) -> str:
    recoveries = sorted(s for t in trials for s in t.recovery_s)

    def pct(p: float) -> str:
        return f"{recoveries[min(len(recoveries) - 1, int(p * len(recoveries)))]:.2f} s" if recoveries else "-"

    lines = [
        "| Fault | Trials | Restarts | Lost | Duplicated | Unexpected |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for fault in FAULTS:
        of = [t for t in trials if t.fault == fault]
        if of:
            lines.append(
                f"| `{fault}` | {len(of)} | {sum(t.restarts for t in of)} | {sum(t.lost for t in of)} | "
                f"{sum(t.duplicated for t in of)} | {sum(t.unexpected for t in of)} |"
            )
    lines += [
        "",
        f"{len(trials)} trials, {sum(t.violations for t in trials)} violations. Recovery (failure noticed to "
        f"every worker running again), {len(recoveries)} recoveries: median {pct(0.5)}, p90 {pct(0.9)}, "
        f"max {pct(1.0)}. Trial length median {statistics.median(t.seconds for t in trials):.1f} s.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Randomized fault trials of a stateful job on local Spark")
    parser.add_argument("--trials", type=int, default=len(FAULTS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the trials here")
    args = parser.parse_args(argv)
    from pyspark import cloudpickle

    from epochal.cluster.spark import create_session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark = create_session("local[2]")
    rng = random.Random(args.seed)
    trials: list[Trial] = []
    try:
        with tempfile.TemporaryDirectory(prefix="epochal-chaos-") as directory:
            for number in range(args.trials):
                fault = FAULTS[number % len(FAULTS)] if number < len(FAULTS) else rng.choice(FAULTS)
                trial = run_trial(spark, number, fault, rng, directory)
                trials.append(trial)
                print(f"trial {number}: {fault}: {trial.violations} violations, {trial.restarts} restart(s)",
                      file=sys.stderr)
    finally:
        spark.stop()
    print(summary(trials))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(t) for t in trials], indent=1))
    return 1 if any(t.violations for t in trials) else 0


if __name__ == "__main__":
    sys.exit(main())
