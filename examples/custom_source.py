"""A custom replayable source: integers from a range, cut into splits, resumable by position.

What makes a source replayable (the contract of `epochal.Source`):
- `splits()` returns the same splits, in the same order, in every process and every run;
  split `i` is read by source subtask `i % parallelism`;
- `open_split(split, position)` resumes a split at a position the reader reported;
- `SplitReader.position()` points just past the last record `read` handed out.
A checkpoint stores each split's position; a restore reopens the splits there, so every record
after the checkpoint is read again, and none before it.

The job counts the last digits of the squares of 1..N (a running `(digit, count)` per number)
into `out-custom-source/`, checkpointing into `ckpt-custom-source/`. Set `CRASH_ONCE=1` to make
the job fail once, half-way: it restarts from its latest checkpoint and commits the same output
as a run without the failure.

    python examples/custom_source.py                                  # from the repository root
    CRASH_ONCE=1 epochal run --executor inprocess examples/custom_source.py

Every run starts over (`existing="overwrite"`, `mode="overwrite"`): `out-custom-source/` holds one
run's output.
"""

import os
import time
from dataclasses import dataclass

from epochal import CheckpointConfig, RestartStrategy, Source, SplitReader, StreamEnvironment
from epochal.connectors import FileSink

N = 200_000


@dataclass(frozen=True)
class RangeSplit:
    split_id: str  # stable across runs: it keys the split's position in checkpoints
    start: int
    stop: int


class _RangeReader(SplitReader):
    def __init__(self, split, position, pause):
        self.split = split
        self.next = split.start if position is None else position
        self.pause = pause

    def read(self, max_records):
        if self.next >= self.split.stop:
            return None  # end of the split
        stop = min(self.next + max_records, self.split.stop)
        batch = list(range(self.next, stop))
        self.next = stop
        time.sleep(self.pause)  # stands in for I/O; stretches the run over a few checkpoints
        return batch

    def position(self):
        return self.next  # just past the last record handed out


class RangeSource(Source):
    """The integers `[start, stop)` in `splits` contiguous splits.

    The object is pickled to the workers on Spark: keep it plain data (no open files or
    connections); readers are created where they run.
    """

    def __init__(self, start, stop, splits=4, pause=0.0):
        bounds = [start + (stop - start) * i // splits for i in range(splits + 1)]
        self._splits = [RangeSplit(f"range-{i}", bounds[i], bounds[i + 1]) for i in range(splits)]
        self.pause = pause

    def splits(self):
        return self._splits

    def open_split(self, split, position):
        return _RangeReader(split, position, self.pause)


class CrashOnce:
    """A map function that fails on record `at` unless `marker` exists (and creates it)."""

    def __init__(self, at, marker):
        self.at = at
        self.marker = os.path.abspath(marker)

    def __call__(self, n):
        if n == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"CRASH_ONCE: failing once at record {n}")
        return n


if __name__ == "__main__":
    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=0.2, directory="ckpt-custom-source",
                                                        existing="overwrite"),
                            restart=RestartStrategy(max_restarts=1))
    numbers = env.from_source(RangeSource(1, N + 1, splits=4, pause=0.002))
    if os.environ.get("CRASH_ONCE"):
        marker = "ckpt-custom-source/.crashed-once"
        if os.path.exists(marker):
            os.remove(marker)
        numbers = numbers.map(CrashOnce(at=N // 2, marker=marker), name="crash_once")
    (numbers
        .map(lambda n: n * n % 10)       # the last digit of n²
        .key_by(lambda digit: digit)
        .count()                          # running (digit, count)
        .sink_to(FileSink("out-custom-source/", mode="overwrite")))
    result = env.execute("custom_source")

    restored = [c for c in result.restored_from if c is not None]
    print(f"custom_source: {N:,} numbers counted into out-custom-source/, "
          f"{len(result.checkpoints)} checkpoint(s), {result.restarts} restart(s)"
          + (f", restored from checkpoint {restored[-1]}" if restored else ""))
