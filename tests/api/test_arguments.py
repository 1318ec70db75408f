"""Arguments are checked where they are given: every constructor and configuring method a user calls
rejects a value it cannot run with at once, with TypeError or ValueError naming the argument, instead
of running with a silent substitute (parallelism=0 used to mean "the CPU count") or failing later
inside a running job.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from epochal import (
    AggregateFunction,
    CheckpointConfig,
    KeyedProcessFunction,
    RestartStrategy,
    StateConfig,
    StreamEnvironment,
)
from epochal.api.overrides import RunOverrides
from epochal.config import JobConfig
from epochal.connectors import FileSink, TextFileSource
from epochal.spark import register
from epochal.spark._source import _checkpoint_id
from epochal.testing import CollectSink, ListSource


def _env(**options: Any) -> StreamEnvironment:
    options.setdefault("executor", "inprocess")
    return StreamEnvironment(2, **options)


def _stream() -> Any:
    return _env(max_parallelism=8).from_source(ListSource([1, 2]))


def _keyed() -> Any:
    return _stream().key_by(lambda r: r)


class _Sum(AggregateFunction[int, int, int]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: int, accumulator: int) -> int:
        return accumulator + value

    def get_result(self, accumulator: int) -> int:
        return accumulator


class _Echo(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        return (value,)


Case = tuple[str, Callable[[], Any], type[Exception], str]

# (id, the call, the error, the argument its message must name)
CASES: list[Case] = [
    # -- StreamEnvironment ------------------------------------------------------------------------
    ("env-parallelism-zero", lambda: StreamEnvironment(0), ValueError, "parallelism"),
    ("env-parallelism-negative", lambda: StreamEnvironment(-1), ValueError, "parallelism"),
    ("env-parallelism-float", lambda: StreamEnvironment(2.5), TypeError, "parallelism"),  # type: ignore[arg-type]
    ("env-parallelism-str", lambda: StreamEnvironment("2"), TypeError, "parallelism"),  # type: ignore[arg-type]
    ("env-parallelism-bool", lambda: StreamEnvironment(True), TypeError, "parallelism"),
    ("env-parallelism-above-max", lambda: StreamEnvironment(9, max_parallelism=8), ValueError, "parallelism"),
    ("env-max-parallelism", lambda: StreamEnvironment(1, max_parallelism=0), ValueError, "max_parallelism"),
    ("env-checkpoint", lambda: _env(checkpoint={"interval": 1}), TypeError, "checkpoint"),
    ("env-restart", lambda: _env(restart=3), TypeError, "restart"),
    ("env-executor", lambda: _env(executor="threads"), ValueError, "executor"),
    ("env-executor-type", lambda: _env(executor=None), TypeError, "executor"),
    ("env-spark", lambda: _env(spark="local[2]"), TypeError, "spark"),
    ("env-batch-size", lambda: _env(batch_size=0), ValueError, "batch_size"),
    ("env-channel-capacity", lambda: _env(channel_capacity=-1), ValueError, "channel_capacity"),
    ("env-seed", lambda: _env(seed="0"), TypeError, "seed"),
    ("env-state-backend", lambda: _env(state_backend="redis"), ValueError, "state_backend"),
    ("env-state", lambda: _env(state="disk"), TypeError, "state"),
    ("env-gc-threshold-length", lambda: _env(gc_threshold=(1, 2)), TypeError, "gc_threshold"),
    ("env-gc-threshold-negative", lambda: _env(gc_threshold=(1, 2, -3)), ValueError, "gc_threshold"),
    ("env-from-source", lambda: _env().from_source([1, 2]), TypeError, "source"),
    ("env-from-source-name", lambda: _env().from_source(ListSource([1]), name=""), ValueError, "name"),
    ("env-job-graph-name", lambda: _env().job_graph(name=3), TypeError, "name"),
    ("env-execute-name", lambda: _env().execute(""), ValueError, "name"),
    ("env-execute-from-checkpoint", lambda: _env().execute(from_checkpoint=-1), ValueError, "from_checkpoint"),
    ("env-execute-from-checkpoint-type", lambda: _env().execute(from_checkpoint=1.5), TypeError, "from_checkpoint"),
    ("env-execute-allow", lambda: _env().execute(allow_non_restored_state="yes"), TypeError,
     "allow_non_restored_state"),
    # -- RunOverrides (what `epochal run` imposes) -------------------------------------------------
    ("overrides-parallelism", lambda: RunOverrides(parallelism=0), ValueError, "parallelism"),
    ("overrides-directory", lambda: RunOverrides(checkpoint_directory=""), ValueError, "checkpoint_directory"),
    ("overrides-from-checkpoint", lambda: RunOverrides(from_checkpoint=""), ValueError, "from_checkpoint"),
    ("overrides-progress", lambda: RunOverrides(progress="stdout"), TypeError, "progress"),
    ("overrides-executor", lambda: RunOverrides(executor="local"), ValueError, "executor"),
    ("overrides-allow", lambda: RunOverrides(allow_non_restored_state=1), TypeError, "allow_non_restored_state"),
    # -- CheckpointConfig --------------------------------------------------------------------------
    ("checkpoint-interval-zero", lambda: CheckpointConfig(interval=0), ValueError, "interval"),
    ("checkpoint-interval-nan", lambda: CheckpointConfig(interval=math.nan), ValueError, "interval"),
    ("checkpoint-interval-str", lambda: CheckpointConfig(interval="1s"), TypeError, "interval"),
    ("checkpoint-directory-empty", lambda: CheckpointConfig(directory=""), ValueError, "directory"),
    ("checkpoint-directory-type", lambda: CheckpointConfig(directory=1), TypeError, "directory"),
    ("checkpoint-timeout", lambda: CheckpointConfig(timeout=0), ValueError, "timeout"),
    ("checkpoint-timeout-inf", lambda: CheckpointConfig(timeout=math.inf), ValueError, "timeout"),
    ("checkpoint-min-pause", lambda: CheckpointConfig(min_pause=-0.5), ValueError, "min_pause"),
    ("checkpoint-max-concurrent", lambda: CheckpointConfig(max_concurrent=0), ValueError, "max_concurrent"),
    ("checkpoint-tolerable-failures", lambda: CheckpointConfig(tolerable_failures=-1), ValueError,
     "tolerable_failures"),
    ("checkpoint-retain", lambda: CheckpointConfig(retain=0), ValueError, "retain"),
    ("checkpoint-retain-float", lambda: CheckpointConfig(retain=2.0), TypeError, "retain"),
    ("checkpoint-mode", lambda: CheckpointConfig(mode="async"), ValueError, "mode"),
    # -- StateConfig -------------------------------------------------------------------------------
    ("state-backend", lambda: StateConfig(backend="rocksdb"), ValueError, "backend"),
    ("state-incremental", lambda: StateConfig(incremental="no"), TypeError, "incremental"),
    ("state-compact-every", lambda: StateConfig(compact_every=0), ValueError, "compact_every"),
    ("state-compact-ratio", lambda: StateConfig(compact_ratio=0), ValueError, "compact_ratio"),
    ("state-local-dir", lambda: StateConfig(local_dir=""), ValueError, "local_dir"),
    ("state-inline-entries", lambda: StateConfig(inline_snapshot_entries=-1), ValueError,
     "inline_snapshot_entries"),
    # -- RestartStrategy ---------------------------------------------------------------------------
    ("restart-max-restarts", lambda: RestartStrategy(max_restarts=-1), ValueError, "max_restarts"),
    ("restart-max-restarts-type", lambda: RestartStrategy(max_restarts=None), TypeError, "max_restarts"),
    ("restart-delay", lambda: RestartStrategy(delay=-1.0), ValueError, "delay"),
    # -- JobConfig (built by the environment; checked all the same) ---------------------------------
    ("job-config-checkpoint", lambda: JobConfig(checkpoint=None), TypeError, "checkpoint"),
    ("job-config-channel-capacity", lambda: JobConfig(channel_capacity=0), ValueError, "channel_capacity"),
    ("job-config-batch-size", lambda: JobConfig(batch_size=0), ValueError, "batch_size"),
    ("job-config-gc-threshold", lambda: JobConfig(gc_threshold=(1, 2, 3.0)), TypeError, "gc_threshold"),
    # -- streams -----------------------------------------------------------------------------------
    ("set-parallelism-zero", lambda: _stream().set_parallelism(0), ValueError, "parallelism"),
    ("set-parallelism-above-max", lambda: _stream().set_parallelism(9), ValueError, "parallelism"),
    ("set-parallelism-type", lambda: _stream().set_parallelism("2"), TypeError, "parallelism"),
    ("uid-empty", lambda: _stream().uid(""), ValueError, "uid"),
    ("uid-type", lambda: _stream().uid(7), TypeError, "uid"),
    ("named-empty", lambda: _stream().named("  "), ValueError, "name"),
    ("map-fn", lambda: _stream().map(3), TypeError, "fn"),
    ("map-name", lambda: _stream().map(str, name=""), ValueError, "name"),
    ("filter-predicate", lambda: _stream().filter(None), TypeError, "predicate"),
    ("flat-map-fn", lambda: _stream().flat_map("split"), TypeError, "fn"),
    ("map-batches-fn", lambda: _stream().map_batches(1), TypeError, "fn"),
    ("union-others", lambda: _stream().union([1]), TypeError, "others"),
    ("union-environments", lambda: _stream().union(_stream()), ValueError, "others"),
    ("union-name", lambda: _stream().union(name=5), TypeError, "name"),
    ("iterate-body", lambda: _stream().iterate(None), TypeError, "body"),
    ("iterate-threshold", lambda: _stream().iterate(lambda s: (s, s), feedback_threshold=0), ValueError,
     "feedback_threshold"),
    ("key-by-type", lambda: _stream().key_by(3), TypeError, "key"),
    ("key-by-empty-field", lambda: _stream().key_by(""), ValueError, "key"),
    ("sink-to", lambda: _stream().sink_to(print), TypeError, "sink"),
    ("sink-to-name", lambda: _stream().sink_to(CollectSink(), name=""), ValueError, "name"),
    ("count-name", lambda: _keyed().count(name=""), ValueError, "name"),
    ("reduce-fn", lambda: _keyed().reduce(0), TypeError, "fn"),
    ("aggregate", lambda: _keyed().aggregate(sum), TypeError, "aggregate"),
    ("aggregate-name", lambda: _keyed().aggregate(_Sum(), name=""), ValueError, "name"),
    ("process-function", lambda: _keyed().process(lambda v, ctx: v), TypeError, "function"),
    ("process-name", lambda: _keyed().process(_Echo(), name=""), ValueError, "name"),
    # -- connectors --------------------------------------------------------------------------------
    ("text-source-path", lambda: TextFileSource(""), ValueError, "path"),
    ("text-source-path-type", lambda: TextFileSource(None), TypeError, "path"),
    ("text-source-encoding", lambda: TextFileSource("corpus/", encoding="utf-9"), ValueError, "encoding"),
    ("text-source-split-size", lambda: TextFileSource("corpus/", split_size=0), ValueError, "split_size"),
    ("file-sink-directory", lambda: FileSink(""), ValueError, "directory"),
    ("file-sink-encode", lambda: FileSink("out/", encode="json"), TypeError, "encode"),
    # -- epochal.testing ---------------------------------------------------------------------------
    ("list-source-items", lambda: ListSource(5), TypeError, "items"),
    ("list-source-splits", lambda: ListSource([1], splits=0), ValueError, "splits"),
    ("list-source-batch-size", lambda: ListSource([1], batch_size=0), ValueError, "batch_size"),
    # -- epochal.spark -----------------------------------------------------------------------------
    ("spark-register", lambda: register(None), TypeError, "spark"),
    ("spark-checkpoint-option", lambda: _checkpoint_id("newest"), ValueError, "checkpoint"),
]


@pytest.mark.parametrize(("call", "error", "argument"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_argument_is_rejected_at_once_and_named(call: Callable[[], Any], error: type[Exception],
                                                      argument: str) -> None:
    with pytest.raises(error) as caught:
        call()
    assert argument in str(caught.value)


def test_the_message_says_what_was_expected_and_what_was_given() -> None:
    with pytest.raises(ValueError, match=r"^parallelism must be a positive int, got 0$"):
        StreamEnvironment(0)
    with pytest.raises(TypeError, match=r"^CheckpointConfig\.retain must be a positive int, got True \(bool\)$"):
        CheckpointConfig(retain=True)  # type: ignore[arg-type]


# -- what stays allowed ---------------------------------------------------------------------------------


def test_none_still_means_the_documented_default() -> None:
    env = StreamEnvironment(None, executor="inprocess", checkpoint=None, restart=None, state=None, gc_threshold=None)
    assert env.parallelism >= 1
    assert env.checkpoint == CheckpointConfig()
    assert env.restart == RestartStrategy()
    assert env.state == StateConfig()
    assert env.gc_threshold is None
    assert CheckpointConfig(interval=None, directory=None).interval is None
    assert ListSource([1], batch_size=None).batch_size is None


def test_valid_edge_values_are_accepted(tmp_path: pathlib.Path) -> None:
    env = StreamEnvironment(8, max_parallelism=8, executor="inprocess", seed=-5, gc_threshold=[0, 10, 10])
    assert env.gc_threshold == (0, 10, 10)
    stream = env.from_source(ListSource([1], splits=3)).set_parallelism(8)
    stream.key_by("field").count(name="counts").uid("counts-v1").sink_to(CollectSink())
    assert CheckpointConfig(interval=1, min_pause=0, tolerable_failures=0).interval == 1
    assert RestartStrategy(max_restarts=0, delay=0).max_restarts == 0
    assert StateConfig(inline_snapshot_entries=0).inline_snapshot_entries == 0
    assert _checkpoint_id("latest") is None and _checkpoint_id("12") == 12


def test_paths_may_be_pathlib_paths(tmp_path: pathlib.Path) -> None:
    assert CheckpointConfig(directory=tmp_path).directory == str(tmp_path)  # type: ignore[arg-type]
    assert StateConfig(local_dir=tmp_path).local_dir == str(tmp_path)  # type: ignore[arg-type]
    assert FileSink(tmp_path).directory == str(tmp_path)
    assert TextFileSource(tmp_path).path == str(tmp_path)
