"""Vertical elasticity: a busy function given more processes while the job runs, no state moved.

A CPU-heavy score per reading, then a running total per sensor. The score runs in a pool of
processes of its own (`map(..., processes=1)`); while the job runs, the pool grows to three
processes and shrinks back to one (`handle.resize`), without a barrier, a restart or a replay
(docs/concepts/elasticity.md, vertical elasticity). The committed totals are the same as a run
without resizes; each score records the process that computed it, so the summary can say how
many processes took part.

    python examples/vertical_elasticity.py              # from the repository root
    epochal run --executor inprocess examples/vertical_elasticity.py

Output goes to `out-vertical/`, checkpoints to `ckpt-vertical/` (both replaced by each run).
"""

import os
import shutil
import time

from epochal import CheckpointConfig, EpochalError, Source, SplitReader, StreamEnvironment
from epochal.connectors import FileSink, read_committed

READINGS = 20_000
SENSORS = 50


class Readings(Source):
    """Readings 0, 1, 2, ... in one split, 100 every 20 ms: a replayable source that lasts 4 s at least."""

    class Split:
        split_id = "readings"

    class Reader(SplitReader):
        def __init__(self, position):
            self.next = position or 0

        def read(self, max_records):
            if self.next >= READINGS:
                return None
            time.sleep(0.02)
            batch = list(range(self.next, min(READINGS, self.next + 100)))
            self.next += len(batch)
            return batch

        def position(self):
            return self.next

    def splits(self):
        return [Readings.Split()]

    def open_split(self, split, position):
        return Readings.Reader(position)


def score(reading):
    """CPU-heavy and stateless: what a process pool is for. Tags the result with its process."""
    value = sum(i * i for i in range(reading % 500)) % 97
    return (f"sensor-{reading % SENSORS}", value, os.getpid())


if __name__ == "__main__":
    for directory in ("ckpt-vertical", "out-vertical"):
        shutil.rmtree(directory, ignore_errors=True)
    env = StreamEnvironment(parallelism=1, checkpoint=CheckpointConfig(interval=0.2, directory="ckpt-vertical"))
    (env.from_source(Readings())
        .map(score, name="score", processes=1)
        .key_by(lambda scored: scored[0])
        .reduce(lambda total, scored: (total[0], total[1] + scored[1], scored[2]))
        .sink_to(FileSink("out-vertical/")))
    handle = env.execute_async("vertical_elasticity")
    handle.resize("score", 3)  # two more processes join once they loaded the function
    deadline = time.monotonic() + 60
    while not handle.done() and time.monotonic() < deadline:  # until scores from several processes commit
        if len({pid for _, _, pid in read_committed("out-vertical")}) > 1:
            break
        time.sleep(0.2)
    try:
        handle.resize("score", 1)
    except EpochalError:  # the job ended first: nothing left to resize
        pass
    result = handle.result()

    rows = [tuple(r) for r in read_committed("out-vertical")]
    final = {}
    for sensor, total, _ in rows:
        final[sensor] = total  # the last update of each sensor is its total
    expected = {}
    for reading in range(READINGS):
        sensor, value, _ = score(reading)
        expected[sensor] = expected.get(sensor, 0) + value
    assert final == expected, "the totals are those of a run without resizes"
    processes = len({pid for _, _, pid in rows})
    print(f"vertical_elasticity: {READINGS:,} readings of {SENSORS} sensors totalled into out-vertical/; "
          f"{processes} processes computed scores; {result.restarts} restart(s)")
