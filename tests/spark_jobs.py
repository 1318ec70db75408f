"""Jobs shared by the Spark integration and fault tests (importable by worker processes too),
and the waits and probes those tests share: complete checkpoints, a condition with a deadline,
the `epochal` command in a process group of its own, a sink that records batch types, and a
run with one worker killed (`run_and_kill`)."""

from __future__ import annotations

import collections
import contextlib
import glob
import importlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from epochal import (
    CheckpointConfig,
    JobResult,
    RestartStrategy,
    Sink,
    SinkWriter,
    Source,
    SplitReader,
    StreamEnvironment,
)
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import FileSink, TextFileSource, read_committed
from epochal.runtime.master.control import JobControl
from epochal.runtime.wire.batches import batch_len
from epochal.runtime.wire.elements import Batch
from epochal.state.storage import MANIFEST_NAME

TESTS = os.path.dirname(os.path.abspath(__file__))
JOB_FILE = os.path.join(TESTS, "jobs", "wordcount_job.py")


def write_corpus(directory: str, files: int = 4, lines: int = 1500, seed: int = 7) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    os.makedirs(directory, exist_ok=True)
    for f in range(files):
        with open(os.path.join(directory, f"f{f}.txt"), "w") as out:
            out.writelines(" ".join(rng.choice(words) for _ in range(6)) + "\n" for _ in range(lines))


def expected_updates(directory: str) -> list[tuple[str, int]]:
    """Every `(word, n)` a running count emits: n = 1..count(word)."""
    return sorted((w, i) for w, n in word_counts(directory).items() for i in range(1, n + 1))


def slow_split(line: str) -> list[str]:
    time.sleep(0.002)  # stretch the job (about 6 s) so that a kill lands mid-stream
    return line.split()


def wordcount_env(
    corpus: str, out: str, ckpt: str, *, parallelism: int = 2, interval: float = 0.3, spark: Any = None,
    executor: str = "spark", slow: bool = True, restarts: int = 3, batch_size: int = 64,
    emit: str = "per_record", sink_format: str = "jsonl", sink: Sink | None = None, recovery: Any = None,
) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=parallelism, recovery=recovery,
        executor=executor,  # type: ignore[arg-type]
        spark=spark,
        checkpoint=CheckpointConfig(interval=interval, directory=ckpt),
        restart=RestartStrategy(max_restarts=restarts),
        batch_size=batch_size,  # small batches: a barrier never waits long behind a slow one
    )
    (
        env.from_source(TextFileSource(corpus))
        .flat_map(slow_split if slow else str.split)
        .key_by(lambda w: w)
        .count(emit=emit)  # type: ignore[arg-type]
        .sink_to(sink or FileSink(out, format=sink_format))  # type: ignore[arg-type]
    )
    return env


async def lookup_length(word: str) -> tuple[str, int]:
    """A lookup against a service, as async I/O: a random round trip of 5 to 25 ms."""
    import asyncio

    await asyncio.sleep(0.005 + random.random() * 0.02)
    return word, len(word)


def async_lookup_env(corpus: str, out: str, ckpt: str, *, spark: Any = None, ordered: bool = True,
                     capacity: int = 32) -> StreamEnvironment:
    """Every word of the corpus through `map_async(lookup_length)` into a FileSink: requests are
    in flight at every moment, checkpoints and kills included."""
    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=64,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt, retain=1000),  # the restored one kept to read
        restart=RestartStrategy(max_restarts=3),
    )
    (
        env.from_source(TextFileSource(corpus))
        .flat_map(str.split)
        .rebalance()
        .map_async(lookup_length, capacity=capacity, ordered=ordered, timeout=10.0).uid("lookup")
        .sink_to(FileSink(out))
    )
    return env


def word_counts(directory: str) -> dict[str, int]:
    """Each word's count in the corpus."""
    counts: collections.Counter[str] = collections.Counter()
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                counts.update(line.split())
    return dict(counts)


def check_per_epoch_updates(updates: list[tuple[Any, int]], totals: dict[Any, int]) -> None:
    """What a count with `emit="on_checkpoint"` committed, exactly once: per key, the counts rise
    strictly (a key emits at most once per epoch, never a value twice) and end at its total."""
    by_key: dict[Any, list[int]] = collections.defaultdict(list)
    for key, n in updates:
        by_key[key].append(n)
    assert {k: v[-1] for k, v in by_key.items()} == totals
    for key, seen in by_key.items():
        assert all(a < b for a, b in zip(seen, seen[1:])), (key, seen)


def components_env(out: str, ckpt: str, *, spark: Any = None, slow: float = 0.0, seed: int = 7,
                   vertices: int = 200, edges: int = 260, fail_marker: str | None = None,
                   fail_after: int = 0) -> StreamEnvironment:
    """The connected-components example's loop, optionally slowed down, or failing once, inside."""
    cc: Any = importlib.import_module("connected_components")  # examples/, on sys.path in the tests

    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=16,
        checkpoint=CheckpointConfig(interval=0.2, directory=ckpt),
        restart=RestartStrategy(max_restarts=3),
    )
    original = cc.PropagateLabels.process_element

    class SlowPropagate(cc.PropagateLabels):  # type: ignore[misc]
        calls = 0

        def process_element(self, message: Any, ctx: Any) -> Any:
            if slow:
                time.sleep(slow)
            SlowPropagate.calls += 1
            if fail_marker and SlowPropagate.calls == fail_after and not os.path.exists(fail_marker):
                open(fail_marker, "w").close()
                raise ValueError("injected failure inside the loop")
            return original(self, message, ctx)

    from epochal.testing import ListSource

    graph = cc.random_graph(vertices, edges, seed)

    def body(loop: Any) -> tuple[Any, Any]:
        tagged = loop.key_by(lambda m: m[1]).process(SlowPropagate(), name="propagate")
        feedback = tagged.filter(lambda t: t[0] == "feedback").map(lambda t: t[1])
        output = tagged.filter(lambda t: t[0] == "out").map(lambda t: t[1])
        return feedback, output

    (
        env.from_source(ListSource(graph, splits=2))
        .flat_map(lambda e: [("edge", e[0], e[1]), ("edge", e[1], e[0])])
        .iterate(body, name="loop")
        .sink_to(FileSink(out))
    )
    return env


# -- Spark Connect ------------------------------------------------------------------------------------
def serve_connect(spark: Any, settings: dict[str, str] | None = None) -> str:
    """Start Spark Connect's service on the driver of the classic session `spark`, as
    `SparkSession.builder.remote("local[N]")` does at start-up, and return its URL,
    `sc://127.0.0.1:PORT`. `settings` go into the driver's configuration first."""
    sc = spark.sparkContext
    conf = sc._jsc.sc().conf()  # the driver's live SparkConf, which the service reads
    defaults = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": "0",  # any free port
        "spark.sql.artifact.isolation.enabled": "true",  # as remote("local") sets it
    }
    for key, value in {**defaults, **(settings or {})}.items():
        conf.set(key, value)
    service = getattr(getattr(sc._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
    service.start(sc._jsc.sc())
    return f"sc://127.0.0.1:{service.localPort()}"


# -- waiting on a run from outside -------------------------------------------------------------------
def complete_checkpoints(ckpt: str) -> list[str]:
    """The manifests of the complete checkpoints under `ckpt` (a manifest is written last)."""
    return sorted(glob.glob(os.path.join(ckpt, "chk-*", MANIFEST_NAME)))


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Return once `condition()` holds; fail, naming `what`, after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(0.02)  # the poll interval, not a guess at how long anything takes


def epochal_cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`epochal ARGS` in a new process group (so a test can kill the driver, its JVM and workers)."""
    return subprocess.Popen(
        [sys.executable, "-m", "epochal.cli.main", *args], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


# -- a probe for what reaches a sink on a worker -------------------------------------------------------
class _BatchTypeWriter(SinkWriter):
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, batch: Batch) -> None:
        with open(self.path, "a") as f:
            f.write(f"{type(batch).__name__} {batch_len(batch)}\n")


class BatchTypeSink(Sink):
    """A sink without commits that writes the type and size of every batch it receives to a file
    per subtask: it shows, from the driver, what shape of batch reached an operator on a worker."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        os.makedirs(self.directory, exist_ok=True)
        return _BatchTypeWriter(os.path.join(self.directory, f"subtask-{subtask}.txt"))


def batch_types(directory: str) -> dict[str, list[tuple[str, int]]]:
    """Per subtask file of a `BatchTypeSink`: `(type name, rows)` of each batch, in order."""
    out: dict[str, list[tuple[str, int]]] = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            out[name] = [(kind, int(rows)) for kind, rows in (line.split() for line in f)]
    return out


@contextlib.contextmanager
def cancelled_on_failure(control: JobControl, thread: threading.Thread) -> Iterator[None]:
    """A test that fails while its job runs in `thread` cancels the job and waits for it: a
    stage left running holds its task slots, and every Spark test after it would fail waiting."""
    try:
        yield
    except BaseException:
        control.request_cancel()
        thread.join(timeout=120)
        raise


def run_and_kill(
    spark: Any, env: StreamEnvironment, name: str, ckpt: str, rng: random.Random, *,
    after_checkpoint: bool = True, delay: tuple[float, float] = (0.0, 1.0), whole_task: bool = False,
) -> tuple[JobResult, SparkExecutor]:
    """Run `env` on Spark in a thread and SIGKILL one of its workers at a random moment.

    With `after_checkpoint` the moment is drawn after a checkpoint completed (there is state to
    restore), else after both workers said hello. The waits are conditions with deadlines; the
    random delay only picks the moment of the kill. `whole_task`: kill the worker's Spark task
    (its supervisor, the worker with it) instead of the worker's process.
    """
    executor = SparkExecutor(spark)
    job = env.job_graph(name)
    control = JobControl(job.name, job.parallelism)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(job, control=control)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    with cancelled_on_failure(control, thread):
        wait_until(lambda: len(executor.worker_pids) == 2 or not thread.is_alive(), "both workers said hello")
        if after_checkpoint:
            wait_until(lambda: bool(complete_checkpoints(ckpt)) or not thread.is_alive(), "a checkpoint completed")
        time.sleep(rng.uniform(*delay))  # the moment of the kill, not a wait for anything
        assert thread.is_alive(), f"the job ended before the kill ({outcome.get('error')!r})"
        victims = executor.supervisor_pids if whole_task else executor.worker_pids
        try:
            os.kill(rng.choice(sorted(victims.values())), signal.SIGKILL)
        except ProcessLookupError:  # the job ended meanwhile: let it finish, so no stage outlives the test
            thread.join(timeout=300)
            raise AssertionError(f"the job ended before the kill ({outcome.get('error')!r})") from None
        thread.join(timeout=300)
        assert not thread.is_alive(), "the job did not finish after the kill"
    if "error" in outcome:
        raise outcome["error"]
    result: JobResult = outcome["result"]
    return result, executor


def launches(executor: SparkExecutor) -> int:
    """How many barrier stages the job submitted."""
    return [event for event, _ in executor.timeline].count("submitted")


class _EndlessSplit:
    split_id = "endless"


class _EndlessReader(SplitReader):
    def __init__(self, position: int, stop_at: int | None) -> None:
        self.next = position
        self.stop_at = stop_at

    def read(self, max_records: int) -> list[int]:
        time.sleep(0.005)
        end = self.next + 10 if self.stop_at is None else min(self.next + 10, self.stop_at)
        out = list(range(self.next, end))
        self.next = end
        return out

    def position(self) -> int:
        return self.next


class EndlessSource(Source):
    """Increasing integers without end, ten every 5 ms: a job that runs until it is cancelled.
    With `stop_at`, the integers below it, then nothing (idle, never ended)."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at = stop_at

    def splits(self) -> list[Any]:
        return [_EndlessSplit()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _EndlessReader(position or 0, self.stop_at)


class _QuietReader(SplitReader):
    """`records` integers, then nothing, ever: an unbounded source with no more data; counts
    its reads in `QuietSource.reads` (in-process only)."""

    def __init__(self, position: int, records: int, wait: float, reads: list[int]) -> None:
        self.next, self.records, self.wait, self.reads = position, records, wait, reads

    def read(self, max_records: int) -> list[int]:
        self.reads.append(self.next)
        out = list(range(self.next, min(self.next + max_records, self.records)))
        self.next += len(out)
        return out

    def position(self) -> int:
        return self.next

    def retry_after(self) -> float:
        return self.wait


class QuietSource(Source):
    """An unbounded source that goes quiet after `records` integers; its reader asks to be
    polled again `wait` seconds after a read that found nothing."""

    def __init__(self, records: int = 100, wait: float = 0.2) -> None:
        self.records, self.wait = records, wait
        self.reads: list[int] = []

    def splits(self) -> list[Any]:
        return [_EndlessSplit()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _QuietReader(position or 0, self.records, self.wait, self.reads)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- a watched directory ------------------------------------------------------------------------------
def add_file(directory: Path, name: str, lines: int, seed: int, marker: str = "") -> None:
    """Write a file elsewhere and rename it in, as a watched directory must receive files; a
    `marker` is a line of its own in the middle."""
    rng = random.Random(seed)
    rows = [f"w{rng.randrange(40)} w{rng.randrange(40)}\n" for _ in range(lines)]
    if marker:
        rows.insert(lines // 2, marker + "\n")
    staging = directory / f".{name}.tmp"  # a dot name: the source never lists it
    staging.write_text("".join(rows))
    os.rename(staging, directory / name)


def expected(directory: Path) -> list[tuple[str, int]]:
    """Every `(word, n)` update a running count emits over the directory's files."""
    counts: collections.Counter[str] = collections.Counter()
    for path in sorted(directory.glob("[!._]*")):
        counts.update(path.read_text().split())
    return sorted((w, i) for w, n in counts.items() for i in range(1, n + 1))


def committed(out: Path) -> list[tuple[str, int]]:
    return sorted(tuple(r) for r in read_committed(str(out))) if out.exists() else []  # type: ignore[misc]


def run_in_background(executor: Any, job: Any, control: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Start `job` on `executor` in a thread (stopped through `control`); its `JobResult` ends up
    under "result" in the dict, what it raises under "error"."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = executor.execute(job, None, control)
        except BaseException as exc:  # noqa: BLE001 - checked in the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


# -- message logs (tests/fault/test_spark_logs.py) ------------------------------------------------
LOG_USERS = 30


def log_clicks(count: int, seed: int, start: int = 0) -> list[bytes]:
    """`count` clicks of `LOG_USERS` users as JSON payloads, numbered from `start`."""
    rng = random.Random(seed)
    return [b'{"user": "u%d", "n": %d}' % (rng.randrange(LOG_USERS), i) for i in range(start, start + count)]


def slow_click(row: Any) -> Any:
    time.sleep(0.003)  # stretch the job so that a kill lands mid-stream
    return row


def log_counts_env(
    kind: str, url: str, ckpt: str, *, spark: Any = None, bounded: bool = False, restarts: int = 3,
) -> StreamEnvironment:
    """A running count of clicks per user from a JetStream stream (`CLICKS`, subjects
    `clicks.*`) or Redis streams (`clicks:*`), each update written to the same kind of log
    (`counts.all` in the stream `COUNTS`, or the Redis stream `counts`), exactly once."""
    import pyarrow as pa

    from epochal.connectors.jetstream import JetStreamSink, JetStreamSource
    from epochal.connectors.log import JsonFormat
    from epochal.connectors.redis_streams import RedisStreamSink, RedisStreamSource

    clicks = JsonFormat(pa.schema([("user", pa.string()), ("n", pa.int64())]))
    counts = JsonFormat(pa.schema([("user", pa.string()), ("count", pa.int64())]))
    source: Any
    sink: Any
    if kind == "nats":
        source = JetStreamSource(url, "CLICKS", clicks, bounded=bounded, discover=0.2)
        sink = JetStreamSink(url, "counts.all", counts, name="counts")
    else:
        source = RedisStreamSource(url, "clicks:*", clicks, bounded=bounded, discover=0.2)
        sink = RedisStreamSink(url, "counts", counts, name="counts")
    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=spark, batch_size=32,
        checkpoint=CheckpointConfig(interval=0.3, directory=ckpt), restart=RestartStrategy(max_restarts=restarts),
    )
    (env.from_source(source)
        .map(slow_click)
        .key_by(lambda row: row[0])
        .count()
        .map(lambda update: {"user": update[0], "count": update[1]})
        .sink_to(sink))
    return env


def count_updates(payloads: list[bytes]) -> list[tuple[str, int]]:
    """Every `(user, n)` a running count emits over these clicks: n = 1..count(user)."""
    import json

    totals = collections.Counter(json.loads(p)["user"] for p in payloads)
    return sorted((u, i) for u, n in totals.items() for i in range(1, n + 1))
