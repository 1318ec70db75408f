"""Recovery of whole stream programs: a crash, a restore from the latest checkpoint, and the
same committed output as a run without the crash (exactly once, ABS §4 / dissertation §4.1.3).

`ListSource` fails the job once at a `Crash()` sentinel; `CollectSink.committed()` holds only
what checkpoints committed. Runs use a virtual clock and a seeded scheduler where timing matters,
so every run here replays exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal import (
    AggregateFunction,
    CheckpointConfig,
    JobFailedError,
    KeyedProcessFunction,
    RestartStrategy,
    StreamEnvironment,
)
from epochal.api.stream import DataStream
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import FileSink, read_committed
from epochal.errors import InjectedFailure, OperatorError
from epochal.runtime.result import JobResult
from epochal.testing import CollectSink, Crash, ListSource

Record = tuple[str, int]
RunVirtual = Callable[..., JobResult]

N_RECORDS = 400
# Late in the second source split (records 200..399), so that checkpoints complete before it
# whatever the seed: the restore then really comes from a checkpoint.
CRASH_AT = 350


class Sum(AggregateFunction[Record, int, int]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Record, acc: int) -> int:
        return acc + value[1]

    def get_result(self, acc: int) -> int:
        return acc


class Stateful(KeyedProcessFunction):
    """Uses all three kinds of keyed state; the output depends on every one of them."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.value_state("count", default=0)
        self.recent = ctx.list_state("recent")
        self.parity = ctx.map_state("parity")

    def process_element(self, value: Record, ctx: Any) -> Iterator[tuple[Any, ...]]:
        n = self.count.value() + 1
        self.count.update(n)
        recent = self.recent.get()[-2:] + [value[1]]
        self.recent.update(recent)
        side = "even" if value[1] % 2 == 0 else "odd"
        self.parity.put(side, self.parity.get(side, 0) + 1)
        yield (ctx.key, n, tuple(recent), tuple(sorted(self.parity.items())))


PIPELINES: dict[str, Callable[[DataStream], DataStream]] = {
    "count": lambda s: s.key_by(lambda r: r[0]).count(),
    "reduce": lambda s: s.key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1])),
    "aggregate": lambda s: s.key_by(lambda r: r[0]).aggregate(Sum()),
    "process": lambda s: s.key_by(lambda r: r[0]).process(Stateful()),
    "stateless": lambda s: s.map(lambda r: (r[0], r[1] * 2)).filter(lambda r: r[1] % 3).flat_map(lambda r: [r, r]),
    "columnar": lambda s: s.map_batches(lambda b: b.rename_columns(["k", "v"]).select(["k"])).key_by("k").count(),
}


def _items(crash_at: int | None = None) -> list[Any]:
    # Each key lives in one half of the input, so in one of the two source splits: its records
    # reach the keyed operator in one order in every run, and order-dependent results
    # (running sums, lists) are comparable between runs that interleave the splits differently.
    half = N_RECORDS // 2
    items: list[Any] = [(f"k{i // half}-{(i * 31) % 7}", i) for i in range(N_RECORDS)]
    if crash_at is not None:
        items.insert(crash_at, Crash())
    return items


def _build(
    pipeline: str, tmp_path: Path, *, crash_at: int | None = None, interval: float = 0.003, parallelism: int = 2,
    directory: str = "ckpt",
) -> tuple[StreamEnvironment, CollectSink]:
    env = StreamEnvironment(
        parallelism=parallelism,
        checkpoint=CheckpointConfig(interval=interval, directory=str(tmp_path / directory)),
        executor="inprocess",
        restart=RestartStrategy(max_restarts=3),
    )
    sink = CollectSink()
    source = ListSource(_items(crash_at), splits=2, batch_size=3)
    PIPELINES[pipeline](env.from_source(source)).sink_to(sink)
    return env, sink


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_a_crash_and_restore_gives_the_output_of_a_run_without_the_crash(
    pipeline: str, tmp_path: Path, run_virtual: RunVirtual
) -> None:
    env, clean_sink = _build(pipeline, tmp_path, directory="clean")
    clean = run_virtual(env, seed=5)
    env, crash_sink = _build(pipeline, tmp_path, crash_at=CRASH_AT, directory="crash")
    crashed = run_virtual(env, seed=5)

    assert clean.restarts == 0
    assert crashed.restarts == 1
    assert len(crashed.failures) == 1 and "Crash() sentinel" in crashed.failures[0]
    # the restore really came from a checkpoint taken before the crash, not from scratch
    assert crashed.restored_from[0] is None and crashed.restored_from[1] is not None
    expected = sorted(clean_sink.committed(), key=repr)
    assert len(expected) > 0
    assert sorted(crash_sink.committed(), key=repr) == expected


def test_the_restored_run_produces_only_what_the_checkpoint_did_not_cover(
    tmp_path: Path, run_virtual: RunVirtual
) -> None:
    env, sink = _build("count", tmp_path, crash_at=CRASH_AT)
    result = run_virtual(env, seed=2)
    assert result.restarts == 1 and result.restored_from[1] is not None
    # the last attempt re-read only what followed its checkpoint ...
    since = {m.name: m for m in result.operators_since}
    assert result.since_checkpoint == result.restored_from[1]
    assert 0 < since["source"].records_out < N_RECORDS
    # ... and the counts of the whole job, carried in the checkpoint, count every record once
    assert result.counts_whole and result.operator("source").records_out == N_RECORDS == result.records_in
    assert result.operator("sink").records_in == N_RECORDS == result.records_out
    assert len(sink.committed()) == N_RECORDS


def test_a_crash_before_the_first_checkpoint_restarts_from_scratch(tmp_path: Path, run_virtual: RunVirtual) -> None:
    env, clean_sink = _build("count", tmp_path, directory="clean")
    run_virtual(env)
    env, sink = _build("count", tmp_path, crash_at=0, directory="crash")
    result = run_virtual(env)
    assert result.restarts == 1
    assert result.restored_from == (None, None)
    assert sorted(sink.committed()) == sorted(clean_sink.committed())


def test_without_checkpoint_storage_a_crash_replays_everything(make_env: Callable[..., StreamEnvironment]) -> None:
    outputs = []
    for crash_at in (None, CRASH_AT):
        env = make_env(parallelism=2, restart=RestartStrategy(max_restarts=1))
        sink = CollectSink()
        PIPELINES["count"](env.from_source(ListSource(_items(crash_at), splits=2, batch_size=3))).sink_to(sink)
        result = env.execute("no-storage")
        assert result.restarts == (0 if crash_at is None else 1)
        outputs.append(sorted(sink.committed()))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == N_RECORDS


def test_wall_clock_execute_recovers_too(tmp_path: Path) -> None:
    env, clean_sink = _build("process", tmp_path, directory="clean", interval=0.001)
    env.execute("wall-clean")
    env, sink = _build("process", tmp_path, crash_at=CRASH_AT, directory="crash", interval=0.001)
    result = env.execute("wall-crash")
    assert result.restarts == 1
    assert sorted(sink.committed()) == sorted(clean_sink.committed())


def test_a_crash_without_restarts_fails_the_job(tmp_path: Path) -> None:
    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path)),
        executor="inprocess",
        restart=RestartStrategy.none(),
    )
    sink = CollectSink()
    env.from_source(ListSource(_items(10), splits=2)).map(lambda r: r).sink_to(sink)
    with pytest.raises(JobFailedError) as info:
        env.execute("no-restarts")
    assert info.value.attempts == 1
    cause = info.value.cause
    assert isinstance(cause, OperatorError) and isinstance(cause.cause, InjectedFailure)
    assert cause.operator == "source"


def test_file_sink_output_is_exactly_once_across_a_crash(tmp_path: Path, run_virtual: RunVirtual) -> None:
    outputs = []
    for crash_at in (None, CRASH_AT):
        tag = "crash" if crash_at is not None else "clean"
        env = StreamEnvironment(
            parallelism=2,
            checkpoint=CheckpointConfig(interval=0.005, directory=str(tmp_path / f"ckpt-{tag}")),
            executor="inprocess",
        )
        counts = env.from_source(ListSource(_items(crash_at), splits=2, batch_size=3)).key_by(lambda r: r[0]).count()
        counts.sink_to(FileSink(str(tmp_path / f"out-{tag}")))
        result = run_virtual(env, seed=4)
        assert result.restarts == (0 if crash_at is None else 1)
        out_dir = tmp_path / f"out-{tag}"
        assert not [p.name for p in out_dir.iterdir() if p.name.endswith(".inprogress")]
        outputs.append(sorted(map(tuple, read_committed(str(out_dir)))))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == N_RECORDS


class TimerPerKey(KeyedProcessFunction):
    """Registers one timer per key on its first record; the timer reports the key's count."""

    def open(self, ctx: Any) -> None:
        self.registered = ctx.value_state("registered", default=False)
        self.count = ctx.value_state("count", default=0)

    def process_element(self, value: Record, ctx: Any) -> None:
        self.count.update(self.count.value() + 1)
        if not self.registered.value():
            self.registered.update(True)
            ctx.register_processing_time_timer(ctx.current_processing_time() + 0.3)

    def on_timer(self, timestamp: float, ctx: Any) -> Iterator[tuple[str, Any]]:
        yield ("timer", ctx.key)


def test_timers_survive_a_restore_and_fire_once(tmp_path: Path, run_virtual: RunVirtual) -> None:
    outputs = []
    for crash_at in (None, 60):
        env = StreamEnvironment(
            parallelism=2,
            checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / f"ckpt-{crash_at}")),
            executor="inprocess",
        )
        sink = CollectSink()
        items: list[Any] = [(f"k{i % 5}", i) for i in range(1200)]
        if crash_at is not None:
            items.insert(crash_at, Crash())
        keyed = env.from_source(ListSource(items, splits=2, batch_size=1)).key_by(lambda r: r[0])
        keyed.process(TimerPerKey()).sink_to(sink)
        result = run_virtual(env, seed=1)
        if crash_at is not None:
            assert result.restarts == 1 and result.restored_from[1] is not None
        outputs.append(sorted(sink.committed()))
    assert outputs[0] == outputs[1] == [("timer", f"k{i}") for i in range(5)]


# -- determinism -----------------------------------------------------------------------------------


def _seeded_run(tmp_path: Path, run_virtual: RunVirtual, seed: int, tag: str) -> tuple[JobResult, list[Any]]:
    env, sink = _build("process", tmp_path, crash_at=CRASH_AT, directory=tag)
    result = run_virtual(env, seed=seed)
    return result, sink.committed()


def test_the_same_seed_replays_a_run_exactly(tmp_path: Path, run_virtual: RunVirtual) -> None:
    first, first_out = _seeded_run(tmp_path, run_virtual, 11, "a")
    second, second_out = _seeded_run(tmp_path, run_virtual, 11, "b")
    assert first.restarts == second.restarts == 1
    assert first.restored_from == second.restored_from
    assert len(first.checkpoints) == len(second.checkpoints) > 1
    assert [c.checkpoint_id for c in first.checkpoints] == [c.checkpoint_id for c in second.checkpoints]
    assert [c.size for c in first.checkpoints] == [c.size for c in second.checkpoints]
    assert first.operators == second.operators
    assert first_out == second_out  # the committed order too, not only the set


def test_the_seed_drives_the_interleaving(tmp_path: Path, run_virtual: RunVirtual) -> None:
    runs = [_seeded_run(tmp_path, run_virtual, seed, f"s{seed}") for seed in range(4)]
    outputs = [out for _, out in runs]
    assert all(sorted(out) == sorted(outputs[0]) for out in outputs)  # same records ...
    assert len({tuple(out) for out in outputs}) > 1  # ... in an order each seed chooses


def test_a_second_restore_resumes_each_split_where_its_reader_left_it(tmp_path: Path) -> None:
    """Every source subtask restores the union of the old positions; a subtask must checkpoint
    only the splits it reads, or its stale copy of another's position wins the next union
    (this run then re-read 1,288 records that the second checkpoint had committed)."""
    first = list(range(2_000))  # split list-0, read by subtask 0
    second: list[Any] = list(range(2_000, 4_000))  # split list-1, read by subtask 1
    second.insert(300, Crash())
    second.insert(1_500, Crash())
    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=5, delay=0.0),
    )
    sink = CollectSink()
    env.from_source(ListSource(first + second, splits=2, batch_size=2)).map(lambda x: x).sink_to(sink)
    result = InProcessExecutor(seed=1, virtual_time=True, step_time=0.001).execute(env.job_graph("two-restores"))
    assert result.restarts == 2 and None not in result.restored_from[1:]
    assert sorted(sink.committed()) == list(range(4_000))
