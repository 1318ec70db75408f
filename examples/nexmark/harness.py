"""What every Nexmark example shares: the source, its watermarks, the job and the summary.

A query module (`examples/nexmark/qN.py`) defines only the query:

    NAME = "q5"
    DESCRIPTION = "hot items: ..."
    def query(events: DataStream) -> DataStream: ...

`events` is the Nexmark stream (`EVENT_SCHEMA` batches: a `kind` column, the event time
`dateTime`, a struct column per kind) with event-time watermarks on `dateTime`; `query` adds its
operators and returns the stream of results, with no source, sink or environment of its own,
so that the benchmark can run the same function with its own source and sink, in process and on
Spark. Everything a query's operators hold is a module-level function or class: picklable.

This module builds the rest: `source` (a `NexmarkSource` with one split per subtask),
`watermarks` (bounded out-of-orderness exactly as large as the source's out-of-order groups
make it), `run` (1 s checkpoints, execution, timing) and `main` (arguments and the printed
one-line summary: the count of results and the last one committed, e.g. `q5: 100,000 events,
...; last result: auction=1012, num=9, window_start=..., window_end=...`). `load` imports a
query module by its path so that its functions pickle by value (Spark's workers need not find
the module on their path).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
import types
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from epochal import CheckpointConfig, DataStream, JobResult, StreamEnvironment, WatermarkStrategy
from epochal.api.connector import Sink, SinkWriter
from epochal.api.environment import Executor
from epochal.connectors.nexmark import NexmarkConfig, NexmarkSource
from epochal.connectors.nexmark.config import event_clock

Query = Callable[[DataStream], DataStream]

CHECKPOINT_INTERVAL = 1.0  # seconds, as in the Nexmark project's Flink runs
DEFAULT_EVENTS = 100_000
DEFAULT_PARALLELISM = 2


def source(
    events: int | None,
    *,
    splits: int,
    rate: int | None = None,
    seed: int = 0,
    out_of_order_group: int = 1,
    config: NexmarkConfig | None = None,
) -> NexmarkSource:
    """The Nexmark source of the examples: `splits` interleaved splits (one per source subtask)."""
    return NexmarkSource(events=events, events_per_second=rate, seed=seed,
                         out_of_order_group=out_of_order_group, splits=splits, config=config)


def watermarks(nexmark: NexmarkSource) -> WatermarkStrategy:
    """Event time is `dateTime`; the delay is the largest a source's out-of-order groups cause.

    An event is emitted at most `group - 1` ids away from its own id, and ids `d` apart are at
    most `ceil(d * 1000 / rate)` ms apart in event time (`EventClock`), so with that delay no
    event is ever late; in id order (a group of 1) the delay is zero.
    """
    rate = event_clock(nexmark.config, nexmark.events_per_second).rate
    delay_ms = math.ceil((nexmark.out_of_order_group - 1) * 1000 / rate)
    return WatermarkStrategy.bounded_out_of_orderness(delay_ms / 1000, timestamp="dateTime")


def event_stream(env: StreamEnvironment, nexmark: NexmarkSource) -> DataStream:
    """The stream a query takes: the source's events with their watermarks."""
    return env.from_source(nexmark, name="nexmark", watermarks=watermarks(nexmark))


def write_files(directory: str, events: int, *, seed: int = 0, file_events: int = 500_000) -> list[str]:
    """The generator's events (in id order) as Parquet files of `file_events` events, flattened
    (`connectors.nexmark.flat`): the files Spark Structured Streaming reads in the benchmark."""
    import pyarrow.parquet as pq

    from epochal.connectors.nexmark.flat import flatten

    nexmark = NexmarkSource(events=events, seed=seed)
    os.makedirs(directory, exist_ok=True)
    paths, first = [], time.time() - 3600
    for i, start in enumerate(range(0, events, file_events)):
        path = os.path.join(directory, f"part-{i:04d}.parquet")
        pq.write_table(flatten(nexmark.slots(start, min(events, start + file_events))), path)
        os.utime(path, (first + i, first + i))  # Spark's file source takes files by modification time
        paths.append(path)
    return paths


def file_stream(env: StreamEnvironment, directory: str, columns: list[str] | None = None) -> DataStream:
    """The stream a query takes, read from Parquet files `write_files` wrote: one row group per
    split, read in order (the files are in event-time order), watermarks on `dateTime` with no
    delay (the events are in id order), each batch back in the stream's layout (`unflatten`).
    `columns`: only these flattened columns (a query's `READS`, `flat.flat_columns`), as Spark
    reads only the columns a query uses."""
    from epochal.connectors import ParquetSource
    from epochal.connectors.nexmark.flat import unflatten

    strategy = WatermarkStrategy.bounded_out_of_orderness(0.0, timestamp="dateTime")
    source = ParquetSource(directory, in_order=True, columns=columns)
    return env.from_source(source, name="nexmark", watermarks=strategy).map_batches(unflatten, name="nexmark-events")


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a query: its sink, its wall time (execution only), its JobResult, how many
    results it committed and the last of them (when the sink was the default `CountSink`, else
    None)."""

    sink: Sink
    seconds: float
    result: JobResult
    committed: int | None
    last: dict[str, Any] | None = None


def run(
    query: Query,
    *,
    name: str,
    events: int,
    parallelism: int = DEFAULT_PARALLELISM,
    rate: int | None = None,
    seed: int = 0,
    out_of_order_group: int = 1,
    sink: Sink | None = None,
    executor: Executor = "inprocess",
    batch_size: int = 1024,
    checkpoint_interval: float = CHECKPOINT_INTERVAL,
    config: NexmarkConfig | None = None,
) -> Run:
    """Run `query` over `events` Nexmark events with checkpoints; the sink defaults to a
    `CountSink` (nothing kept but the number of results); `config`: the generator's parameters
    (e.g. a lower `event_rate`, for more event time in fewer events)."""
    with tempfile.TemporaryDirectory(prefix=f"nexmark-{name}-") as scratch:
        checkpoints = os.path.join(scratch, "checkpoints")
        out = CountSink(os.path.join(scratch, "counts")) if sink is None else sink
        env = StreamEnvironment(parallelism=parallelism, executor=executor,
                                batch_size=batch_size,
                                checkpoint=CheckpointConfig(interval=checkpoint_interval, directory=checkpoints))
        nexmark = source(events, splits=env.parallelism, rate=rate, seed=seed,
                         out_of_order_group=out_of_order_group, config=config)
        query(event_stream(env, nexmark)).sink_to(out)
        start = time.perf_counter()
        result = env.execute(f"nexmark-{name}")
        seconds = time.perf_counter() - start
        if isinstance(out, CountSink):  # read now: the directory goes with the scratch space
            return Run(out, seconds, result, out.committed(), out.last())
        return Run(out, seconds, result, None)


def main(query: Query, name: str, description: str, argv: Sequence[str] | None = None,
         columns: Sequence[str] = (), sink: Callable[[str], Sink] | None = None) -> Run:
    """The command line of an example: parse, run, print one summary line (with the last result,
    its tuple's fields named by `columns`). With `sink` (a query that writes files, q10), the
    results go to `sink(--out)` instead of being counted."""
    parser = argparse.ArgumentParser(prog=f"{name}.py", description=f"Nexmark {name}: {description}")
    if sink is not None:
        parser.add_argument("--out", default=None, help="the output directory (default: a new temporary one)")
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    parser.add_argument("--parallelism", type=int, default=DEFAULT_PARALLELISM)
    parser.add_argument("--rate", type=int, default=None, help="events per second (default: unpaced)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-of-order-group", type=int, default=1,
                        help="events shuffled within groups of this many ids (default: in order)")
    parser.add_argument("--executor", choices=["inprocess", "spark"], default="inprocess")
    args = parser.parse_args(argv)
    out = None if sink is None else (args.out or tempfile.mkdtemp(prefix=f"nexmark-{name}-out-"))
    done = run(query, name=name, events=args.events, parallelism=args.parallelism, rate=args.rate,
               seed=args.seed, out_of_order_group=args.out_of_order_group, executor=args.executor,
               sink=None if sink is None or out is None else sink(out))
    if out is not None:
        import pyarrow.dataset as ds

        rows = ds.dataset(out, format="parquet", partitioning="hive").count_rows()
        print(f"{name}: {args.events:,} events, {rows:,} rows committed to {out} in {done.seconds:.2f} s "
              f"({args.events / done.seconds:,.0f} events/s)")
        return done
    last = done.last
    if last is not None and set(last) == {"value"} and columns and isinstance(last["value"], (list, tuple)):
        last = dict(zip(columns, last["value"], strict=False))
    shown = "no result" if last is None else "last result: " + ", ".join(f"{k}={_shown(v)}" for k, v in last.items())
    results = f"{done.committed:,} result" + ("" if done.committed == 1 else "s")
    print(f"{name}: {args.events:,} events, {results} committed in {done.seconds:.2f} s "
          f"({args.events / done.seconds:,.0f} events/s); {shown}")
    return done


def _shown(value: Any) -> str:
    """A result's value as its column has it: a timestamp as a UTC date and time, text as text."""
    if isinstance(value, datetime.datetime):
        text = value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".")
        return text
    return str(value) if isinstance(value, str) else repr(value)


def _row(batch: Any, index: int) -> dict[str, Any]:
    """Row `index` of a batch as `{column: value}` (an Arrow batch) or `{"value": record}`."""
    if hasattr(batch, "slice") and hasattr(batch, "to_pylist"):
        return dict(batch.slice(index, 1).to_pylist()[0])
    record = batch[index]
    return dict(record) if isinstance(record, dict) else {"value": record}


def _json_value(value: Any) -> Any:
    """A result's value as JSON: a timestamp tagged, a tuple a list, the rest as it is (or its repr)."""
    if isinstance(value, datetime.datetime):
        return {"utc": value.astimezone(datetime.UTC).isoformat()}
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"utc"}:
        return datetime.datetime.fromisoformat(value["utc"])
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    return value


def load(path: str | os.PathLike[str]) -> types.ModuleType:
    """Import a query module from its file, its functions and classes pickled by value.

    Spark ships operators to its workers with cloudpickle, which pickles a function of an
    importable module by reference (module and name); a module loaded from a path is not
    importable on a worker, so this registers it to be pickled by value instead.
    """
    path = os.fspath(path)
    module_name = f"nexmark_{os.path.splitext(os.path.basename(path))[0]}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import a query module from {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickle look modules up by name
    spec.loader.exec_module(module)
    pickle_by_value(module)
    return module


_SIBLINGS: dict[str, types.ModuleType] = {}


def sibling(name: str) -> types.ModuleType:
    """Another query module of this directory (q4 and q6 build on q9), loaded once by path and
    pickled by value, as `load` does: a query imports its sibling through this, never by name."""
    if name not in _SIBLINGS:
        _SIBLINGS[name] = load(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    return _SIBLINGS[name]


def pickle_by_value(module: types.ModuleType) -> None:
    """Have cloudpickle (PySpark's copy and the package, where installed) pickle the functions
    and classes of `module` by value."""
    for pickler in ("pyspark.cloudpickle", "cloudpickle"):
        try:
            importlib.import_module(pickler).register_pickle_by_value(module)
        except ImportError:
            pass


class _CountWriter(SinkWriter):
    def __init__(self, subtask: int) -> None:
        self.subtask = subtask
        self.staged = 0
        self.last: dict[str, Any] | None = None  # the last result staged

    def write(self, batch: Any) -> None:
        rows = batch.num_rows if hasattr(batch, "num_rows") else len(batch)
        if rows:
            self.staged += rows
            self.last = {k: _json_value(v) for k, v in _row(batch, rows - 1).items()}

    def prepare_commit(self, checkpoint_id: int) -> Any:
        if not self.staged:
            return None
        token = (f"{checkpoint_id:08d}-{self.subtask}-{uuid.uuid4().hex}", self.staged, self.last)
        self.staged = 0
        return token


class CountSink(Sink):
    """Counts committed results and keeps the last of each commit: each commit writes one small
    file `<token>.count` holding its count and last result into `directory` (once per token, so
    a repeated commit counts once).
    Commits run in the sink's subtasks, on Spark's workers too, hence files: on local Spark (or
    with a shared directory) `committed()` on the driver sees them all."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        os.makedirs(self.directory, exist_ok=True)
        return _CountWriter(subtask)

    def commit(self, committables: list[Any]) -> None:
        for token, count, last in committables:
            path = os.path.join(self.directory, f"{token}.count")
            if not os.path.exists(path):
                with open(path + ".tmp", "w") as f:
                    json.dump({"count": count, "last": last}, f)
                os.replace(path + ".tmp", path)

    def committed(self) -> int:
        """How many results the job committed."""
        if not os.path.isdir(self.directory):
            return 0
        return sum(int(entry["count"]) for _, entry in self._commits())

    def last(self) -> dict[str, Any] | None:
        """The last result of the newest commit (of the highest subtask, when several committed
        at that checkpoint), `{column: value}`; None if nothing was committed."""
        commits = self._commits()
        if not commits:
            return None
        return {k: _from_json(v) for k, v in commits[-1][1]["last"].items()}

    def _commits(self) -> list[tuple[str, dict[str, Any]]]:
        if not os.path.isdir(self.directory):
            return []
        found = []
        for name in sorted(os.listdir(self.directory)):  # by checkpoint id, then subtask
            if name.endswith(".count"):
                with open(os.path.join(self.directory, name)) as f:
                    found.append((name, json.load(f)))
        return found


pickle_by_value(sys.modules[__name__])  # `CountSink` goes to Spark's workers, which lack this path
