"""A move in steps when the job's input ends: the steps stop, the move ends with an error, and
the job's final checkpoint is its last.

Before, the next step of a batched move (or a step whose read-ahead was under way) started after
the final checkpoint was triggered: its rerouting checkpoint completed after the final one, its
new owners had finished and never took the groups over, and the caller of `move_key_groups`
waited for ever (found on Spark by `tests/fault/test_spark_migration_chaos.py`). The input here
ends only once the move has taken its first step, with dozens of steps still to go.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from epochal import CheckpointConfig, EpochalError, Source, SplitReader, StreamEnvironment
from epochal.state.keygroups import RoutingTable
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink

KEYS, N = 7, 2_000
END = threading.Event()  # the input ends once this is set (in-process: one Python process)


class _Split:
    split_id = "only"


class _Reader(SplitReader):
    def __init__(self, position: int | None) -> None:
        self.next = position or 0

    def read(self, max_records: int) -> list[int] | None:
        if self.next < N:
            out = list(range(self.next, min(N, self.next + 10)))
            self.next = out[-1] + 1
            return out
        if END.is_set():
            return None
        time.sleep(0.002)
        return []

    def position(self) -> int:
        return self.next


class HeldOpen(Source):
    """0..N-1, then nothing until END is set."""

    def splits(self) -> list[Any]:
        return [_Split()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _Reader(position)


def _expected() -> Counter[Any]:
    return Counter((k, n) for k in range(KEYS) for n in range(1, len(range(k, N, KEYS)) + 1))


def test_a_batched_move_under_way_when_the_input_ends_stops_and_the_final_checkpoint_is_the_last(
    tmp_path: Path,
) -> None:
    END.clear()
    sink, ckpt = CollectSink(), str(tmp_path / "c")
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=ckpt))
    env.from_source(HeldOpen()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    handle = env.execute_async("moves-at-the-end")
    start = RoutingTable.contiguous(2, 128)
    errors: list[BaseException] = []

    def move() -> None:  # subtask 0's 64 groups, one per checkpoint
        try:
            handle.move_key_groups({g: 1 for g in start.key_groups_of(0)}, batch=1, timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors.append(exc)

    def moved() -> int:
        storage = CheckpointStorage(ckpt, create=False)
        routing = storage.resolve("latest").routing if storage.complete_checkpoints() else None
        return 0 if routing is None else sum(1 for g in start.key_groups_of(0) if routing.owners[g] == 1)

    deadline = time.monotonic() + 30
    while handle.status().last_checkpoint is None:
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.01)
    mover = threading.Thread(target=move)
    mover.start()
    while not moved():
        assert time.monotonic() < deadline and mover.is_alive(), ("the move took no step", errors)
        time.sleep(0.005)
    assert moved() < 32, "the move is nearly done: the input would not end while it is under way"
    END.set()
    result = handle.result(timeout=60)
    mover.join(timeout=30)
    assert not mover.is_alive(), "a move never ended"
    assert len(errors) == 1 and isinstance(errors[0], EpochalError), errors
    assert "is ending; the key groups not moved yet stay" in str(errors[0])
    assert result.checkpoints[-1].is_final, [(c.checkpoint_id, c.is_final) for c in result.checkpoints]
    assert Counter(sink.committed()) == _expected()
