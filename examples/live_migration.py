"""Key groups moved between running subtasks, live: no task restarts, nothing is replayed.

A running count per key (`(user, n)` for every click) on two subtasks. While it runs, a quarter
of the key groups move from subtask 0 to subtask 1, eight per checkpoint, and then back in one
step. Each move happens at a checkpoint barrier: the old owner counts every click before it, the
new owner every click after it, starting from the count the checkpoint holds
(docs/concepts/elasticity.md). The committed output is the same as a run without moves: for
every user, the counts 1, 2, ... once each.

    python examples/live_migration.py                   # from the repository root
    epochal run --executor inprocess examples/live_migration.py

The same moves from another shell, against the URL and token the job prints under `epochal run`:

    epochal move URL 0-31 1 --batch 8 --token TOKEN

Output goes to `out-live-migration/`, checkpoints to `ckpt-live-migration/`. Like the word count
demo, every run starts over (`existing="overwrite"`, `mode="overwrite"`): run it again and it
replaces the last run's checkpoints and output. To resume a run instead (one cancelled from
another shell), start it with `epochal run examples/live_migration.py --from-checkpoint latest`:
a resumed run keeps its checkpoints and output.
"""

import time

from epochal import CheckpointConfig, Source, SplitReader, StreamEnvironment
from epochal.connectors import FileSink

CLICKS = 40_000
USERS = 500


class Clicks(Source):
    """Clicks 0, 1, 2, ... in one split, 256 every 2 ms: a replayable source that lasts a while."""

    class Split:
        split_id = "clicks"

    class Reader(SplitReader):
        def __init__(self, position):
            self.next = position or 0

        def read(self, max_records):
            if self.next >= CLICKS:
                return None
            time.sleep(0.002)
            batch = list(range(self.next, min(CLICKS, self.next + 256)))
            self.next += len(batch)
            return batch

        def position(self):
            return self.next

    def splits(self):
        return [Clicks.Split()]

    def open_split(self, split, position):
        return Clicks.Reader(position)

if __name__ == "__main__":
    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.2, directory="ckpt-live-migration",
                                                                       existing="overwrite"))
    (env.from_source(Clicks())
        .map(lambda click: f"user-{click % USERS}")
        .key_by(lambda user: user)
        .count()
        .sink_to(FileSink("out-live-migration/", mode="overwrite")))  # replaces the last run's output
    handle = env.execute_async("live_migration")

    quarter = range(0, 32)  # key groups 0-31 of 128: subtask 0 owns 0-63 at parallelism 2
    there = handle.move_key_groups({group: 1 for group in quarter})  # in steps sized by state
    back = handle.move_key_groups({group: 0 for group in quarter}, batch=32)  # all 32 at one checkpoint
    result = handle.result()

    print(f"live_migration: {CLICKS:,} clicks of {USERS} users counted into out-live-migration/; "
          f"key groups 0-31 moved to subtask 1 by checkpoint {there} and back at checkpoint {back}; "
          f"{result.restarts} restart(s)")
