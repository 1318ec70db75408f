"""A source reader hears which of its positions a complete checkpoint holds
(`SplitReader.notify_checkpoint_complete`): only positions of checkpoints that completed, in
order, each no further than what had been read when its barrier passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from epochal import CheckpointConfig, Source, SplitReader, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.testing import CollectSink

ACKS: list[tuple[int, int]] = []


class _Split:
    split_id = "only"


class _Reader(SplitReader):
    def __init__(self, position: int | None) -> None:
        self.next = position or 0

    def read(self, max_records: int) -> list[int] | None:
        if self.next >= 2000:
            return None
        out = list(range(self.next, min(self.next + 10, 2000)))
        self.next += len(out)
        return out

    def position(self) -> int:
        return self.next

    def notify_checkpoint_complete(self, checkpoint_id: int, position: Any) -> None:
        assert position <= self.next
        ACKS.append((checkpoint_id, position))


class _Source(Source):
    def splits(self) -> list[Any]:
        return [_Split()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _Reader(position)


def test_a_reader_is_told_the_positions_of_complete_checkpoints(tmp_path: Path) -> None:
    ACKS.clear()
    env = StreamEnvironment(parallelism=1, batch_size=10,
                            checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "ckpt")))
    sink = CollectSink()
    env.from_source(_Source()).map(lambda x: x).sink_to(sink)
    result = InProcessExecutor(seed=1, virtual_time=True).execute(env.job_graph("acks"))
    assert sorted(sink.committed()) == list(range(2000))
    assert ACKS, "no acknowledgement while the reader was open"
    completed = {c.checkpoint_id for c in result.checkpoints}
    assert all(cid in completed for cid, _ in ACKS)
    assert [c for c, _ in ACKS] == sorted({c for c, _ in ACKS})  # in order, once each
    assert [p for _, p in ACKS] == sorted(p for _, p in ACKS)


def test_the_end_of_a_finished_split_is_acknowledged_once_a_checkpoint_covers_it(tmp_path: Path) -> None:
    """A bounded source's reader hears of its split's end too (Flink acknowledges finished
    splits): it stays open, reading nothing, until a checkpoint after its end completed."""
    ACKS.clear()
    env = StreamEnvironment(parallelism=1, batch_size=10,
                            checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "ckpt")))
    env.from_source(_Source()).sink_to(CollectSink())
    InProcessExecutor(seed=2, virtual_time=True).execute(env.job_graph("end"))
    assert ACKS and ACKS[-1][1] == 2000, ACKS[-3:]
    assert [p for _, p in ACKS].count(2000) == 1  # told once, then closed
