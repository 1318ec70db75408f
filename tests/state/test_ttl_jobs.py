"""State TTL in running jobs: TTL state moves with its key groups, live and by restore, on both
backends, with the times its entries were written; after a restore at another parallelism an
entry expires by the time it was written before the restore, not by the restore."""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any

import pytest

from epochal import (
    CheckpointConfig,
    EpochalError,
    KeyedProcessFunction,
    RestartStrategy,
    StateConfig,
    StateTtlConfig,
    StreamEnvironment,
)
from epochal.runtime.master.control import JobState
from epochal.state.keygroups import RoutingTable
from epochal.testing import CollectSink, ListSource
from spark_jobs import EndlessSource

RECORDS = 6_000
KEYS = 40


class CountWithTtl(KeyedProcessFunction[int, int, tuple[int, int]]):
    """A running count per key in a value state with a TTL long enough never to expire here."""

    def open(self, ctx: Any) -> None:
        self.n = ctx.value_state("n", default=0, ttl=StateTtlConfig(3600, update_on="read_and_write"))

    def process_element(self, value: int, ctx: Any) -> list[tuple[int, int]]:
        n = self.n.value() + 1
        self.n.update(n)
        return [(value % KEYS, n)]


def _wait(predicate: Any, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_ttl_state_moves_live_and_by_restore_with_its_key_groups(tmp_path: Path, backend: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """2 -> 3 by restore, 3 -> 2 by live moves, then a third of the key groups moved back and
    forth: every key counts 1, 2, 3, ... once (a TTL entry lost or left behind by a move would
    start a key over, or count one record twice)."""
    env = StreamEnvironment(parallelism=2, executor="inprocess", state=StateConfig(backend=backend),
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    sink = CollectSink()
    env.from_source(EndlessSource(stop_at=RECORDS)).key_by(lambda x: x % KEYS).process(CountWithTtl()).uid(
        "counts").sink_to(sink)
    handle = env.execute_async("ttl-moves")

    def at(parallelism: int) -> bool:
        status = handle.status()
        return status.state is JobState.RUNNING and status.parallelism == parallelism

    _wait(lambda: at(2) and handle.status().last_checkpoint is not None, "the first checkpoint")
    handle.rescale(3, timeout=60)
    _wait(lambda: at(3), "parallelism 3")
    handle.rescale(2, timeout=60)
    _wait(lambda: at(2), "parallelism 2")
    table = RoutingTable.contiguous(2, 128)
    handle.move_key_groups({g: 1 - table.owners[g] for g in range(0, 128, 3)}, timeout=60)
    _wait(lambda: len(sink.committed()) >= RECORDS, "every record committed")
    handle.cancel()
    with pytest.raises(EpochalError):
        handle.result(timeout=30)
    by_key: dict[int, list[int]] = collections.defaultdict(list)
    for key, n in sink.committed():
        by_key[key].append(n)
    assert sorted(by_key) == list(range(KEYS))
    for key, counts in by_key.items():
        assert sorted(counts) == list(range(1, RECORDS // KEYS + 1)), (key, sorted(counts)[:5])
    assert "rescaling to 3 from checkpoint" in caplog.text  # by restore, as said


class SeenBefore(KeyedProcessFunction[int, int, tuple[int, bool]]):
    def open(self, ctx: Any) -> None:
        self.seen = ctx.value_state("seen", default=False, ttl=StateTtlConfig(TTL))

    def process_element(self, value: int, ctx: Any) -> list[tuple[int, bool]]:
        repeat = self.seen.value()
        self.seen.update(True)
        return [(value, repeat)]


TTL = 6.0


def test_after_restores_at_other_parallelisms_entries_expire_by_their_write_time(tmp_path: Path) -> None:
    """Run 1 (parallelism 2) writes keys 0..99 by `end`. Run 2 restores at parallelism 3 at
    `end + 3 s` and reads keys 0..49: still there (repeats); its checkpoint carries keys 50..99
    untouched. Run 3 restores at parallelism 1 at `end + TTL + 0.5 s`: keys 50..99 have expired.
    Had a restore renewed the entries (written anew at `end + 3 s`), they would still be there."""

    def run(parallelism: int, items: list[int], n: int) -> dict[int, bool]:
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess", restart=RestartStrategy.none(),
                                checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
        sink = CollectSink()
        env.from_source(ListSource(items, batch_size=10), name=f"src-{n}").key_by(lambda x: x).process(
            SeenBefore()).uid("seen").sink_to(sink, name=f"out-{n}")
        env.execute(f"run-{n}", from_checkpoint="latest" if n > 1 else None, allow_non_restored_state=True)
        return dict(sink.committed())

    assert run(2, list(range(100)), 1) == dict.fromkeys(range(100), False)
    end = time.monotonic()
    time.sleep(3.0)
    second = run(3, list(range(50)), 2)
    assert time.monotonic() - end < TTL - 0.5, "run 2 took too long to check what is within the TTL"
    assert second == dict.fromkeys(range(50), True), "written before the restore, within the TTL: repeats"
    time.sleep(max(0.0, end + TTL + 0.5 - time.monotonic()))
    assert run(1, list(range(50, 100)), 3) == dict.fromkeys(range(50, 100), False), "past the TTL: expired"
