"""Rescaling: a job restarts from a checkpoint with another parallelism, and every key's state
survives exactly (key groups move in ranges; source and sink operator state is redistributed).

Each run reads a new batch of records through a new source (the old source's state is dropped
with `allow_non_restored_state`), and the keyed operators keep their uids, so the state after
run k must be that of one run over batches 1..k, whatever the parallelism of each run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, JobFailedError, KeyedProcessFunction, RestartStrategy, StreamEnvironment
from epochal.runtime.result import JobResult
from epochal.state.reader import read_state
from epochal.testing import CollectSink, Crash, ListSource

KEYS: list[Any] = [f"key-{i}" for i in range(60)] + list(range(20)) + [("t", i) for i in range(10)]


class Totals(KeyedProcessFunction):
    """Value, list and map state per key; emits the key's running total."""

    def open(self, ctx: Any) -> None:
        self.total = ctx.value_state("total", default=0)
        self.seen = ctx.list_state("seen")
        self.parity = ctx.map_state("parity")

    def process_element(self, value: Any, ctx: Any) -> Iterator[tuple[Any, int]]:
        self.total.update(self.total.value() + value[1])
        self.seen.add(value[1])
        side = value[1] % 2
        self.parity.put(side, self.parity.get(side, 0) + 1)
        yield (ctx.key, self.total.value())


def _batch(run: int) -> list[tuple[Any, int]]:
    return [(KEYS[(i * 7 + run) % len(KEYS)], run * 1000 + i) for i in range(300)]


def _run(
    tmp_path: Path, run: int, parallelism: int, backend: str, *, from_checkpoint: str | None = None
) -> tuple[JobResult, CollectSink]:
    env = StreamEnvironment(
        parallelism=parallelism,
        checkpoint=CheckpointConfig(interval=0.002, directory=str(tmp_path / "ckpt"), retain=2),
        executor="inprocess",
        restart=RestartStrategy.none(),
        state_backend=backend,
        seed=run,
    )
    sink = CollectSink()
    keyed = env.from_source(ListSource(_batch(run), splits=3, batch_size=7), name=f"batch-{run}").key_by(lambda r: r[0])
    keyed.process(Totals()).uid("totals").sink_to(sink, name=f"totals-out-{run}")
    keyed.count().uid("counts").sink_to(CollectSink(), name=f"counts-out-{run}")
    result = env.execute(f"run-{run}", from_checkpoint=from_checkpoint, allow_non_restored_state=True)
    return result, sink


def _expected(runs: int) -> tuple[dict[Any, int], dict[Any, int], dict[Any, list[int]]]:
    totals: dict[Any, int] = {}
    counts: Counter[Any] = Counter()
    seen: dict[Any, list[int]] = {}
    for run in range(1, runs + 1):
        for key, v in _batch(run):
            totals[key] = totals.get(key, 0) + v
            counts[key] += 1
            seen.setdefault(key, []).append(v)
    return totals, dict(counts), seen


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_state_survives_rescaling_2_3_1_2(tmp_path: Path, backend: str) -> None:
    for run, parallelism in enumerate([2, 3, 1, 2], start=1):
        result, sink = _run(tmp_path, run, parallelism, backend, from_checkpoint=None if run == 1 else "latest")
        assert (result.restored_from[0] is not None) == (run > 1), f"run {run} restored {result.restored_from}"
        totals, counts, seen = _expected(run)
        state = read_state(str(tmp_path / "ckpt"), "totals")
        by_state: dict[str, dict[Any, Any]] = {}
        for row in state:
            by_state.setdefault(row.state, {})[row.key] = row.value
        assert by_state["total"] == totals, f"run {run} at parallelism {parallelism}"
        assert {k: sorted(v) for k, v in by_state["seen"].items()} == {k: sorted(v) for k, v in seen.items()}
        assert {k: sum(m.values()) for k, m in by_state["parity"].items()} == counts
        assert {r.key: r.value for r in read_state(str(tmp_path / "ckpt"), "counts")} == counts
        # every key group is owned by exactly one subtask of the new parallelism
        groups = [r.key_group for r in state]
        assert all(0 <= g < 128 for g in groups)
        # the emitted running totals end at the restored-and-updated totals
        last: dict[Any, int] = {}
        for key, total in sink.committed():
            last[key] = max(last.get(key, 0), total)
        assert last and last == {k: totals[k] for k in last}


def test_sources_and_sinks_rescale_mid_stream(tmp_path: Path) -> None:
    """A job that crashed at parallelism 2 resumes at 3: each split's position and each
    pending commit is taken over by exactly one new subtask, so output is exactly-once."""
    items = [(f"k{i % 13}", i) for i in range(600)]
    crash: list[Any] = [*items[:400], Crash(), *items[400:]]
    directory = str(tmp_path / "ckpt")

    sink = CollectSink()  # one object: the restored committables name its staged records

    def build(parallelism: int, source_items: list[Any]) -> StreamEnvironment:
        env = StreamEnvironment(
            parallelism=parallelism,
            checkpoint=CheckpointConfig(interval=0.001, directory=directory),
            executor="inprocess",
            restart=RestartStrategy.none(),
        )
        env.from_source(ListSource(source_items, splits=6, batch_size=5), name="src").key_by(
            lambda r: r[0]
        ).count().uid("counts").sink_to(sink)
        return env

    with pytest.raises(JobFailedError, match="Crash"):
        build(2, crash).execute("first")
    result = build(3, crash).execute("second", from_checkpoint="latest")
    assert result.restored_from[0] is not None
    per_key = Counter(k for k, _ in items)
    expected = {(k, n) for k in per_key for n in range(1, per_key[k] + 1)}
    # every running count exactly once: no record lost or read twice across the rescale
    assert sorted(sink.committed()) == sorted(expected)
    assert {r.key: r.value for r in read_state(directory, "counts")} == dict(per_key)
