"""Rich functions, operator state, and keyed state that expires.

Two small things most real jobs need besides `map` and keyed state:

- `Batcher` is a `MapFunction` with a lifecycle: `open(ctx)` runs once per subtask (it learns its
  index and parallelism there) and registers an operator list state, `pending`: records of the
  subtask, not of a key, checkpointed with the operator and split among the subtasks when a job
  resumes at another parallelism (`mode="broadcast"` would give every subtask all of them).
  It emits the records in groups of `SIZE`; `snapshot_state` is where a function would copy
  fields into operator state before each checkpoint, `close` where it frees what `open` made.
- `FirstSeen` keeps, per user, when it last saw them in a value state with a time-to-live
  (`StateTtlConfig(600)`): an entry expires ten minutes after it was written, and expired
  entries leave the state by themselves (a few visited per record, and none written to a
  checkpoint), so a stream of ever-new users keeps flat state. A user seen again within the TTL
  is a returning visitor.

Writes `(subtask, [records])` groups to `out-batches/` and `(user, "new" | "returning")` to
`out-visits/`.

    python examples/rich_functions_and_ttl.py                           # from the repository root
    epochal run --executor inprocess examples/rich_functions_and_ttl.py
"""

from epochal import CheckpointConfig, KeyedProcessFunction, MapFunction, StateTtlConfig, StreamEnvironment
from epochal.connectors import FileSink
from epochal.testing import ListSource

SIZE = 10
VISITS = [f"user-{(i * 7) % 60}" for i in range(300)]


class Batcher(MapFunction):
    """Groups a subtask's records by SIZE; the group being filled lives in operator state."""

    def open(self, ctx):
        self.subtask = ctx.subtask
        self.pending = ctx.operator_list_state("pending")  # split on rescale

    def map(self, value):
        self.pending.add(value)
        if len(self.pending) < SIZE:
            return None
        group = self.pending.get()
        self.pending.clear()
        return (self.subtask, group)

    def snapshot_state(self, checkpoint_id):
        pass  # `pending` is operator state already: nothing to copy


class FirstSeen(KeyedProcessFunction):
    """A user is returning if seen within the TTL; the value expires ten minutes after its write."""

    def open(self, ctx):
        self.seen = ctx.value_state("seen", default=False, ttl=StateTtlConfig(600))

    def process_element(self, user, ctx):
        returning = self.seen.value()
        self.seen.update(True)
        yield (user, "returning" if returning else "new")


if __name__ == "__main__":
    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=0.5, directory="ckpt-rich", existing="overwrite"))
    visits = env.from_source(ListSource(VISITS, splits=2))
    (visits.map(Batcher())
        .filter(lambda group: group is not None)
        .sink_to(FileSink("out-batches/", mode="overwrite"), name="batches"))
    (visits.key_by(lambda user: user)
        .process(FirstSeen())
        .sink_to(FileSink("out-visits/", mode="overwrite"), name="visits"))
    result = env.execute("rich-functions-and-ttl")
    print(f"rich_functions_and_ttl: {result.operator('batches').records_in} groups, "
          f"{result.operator('visits').records_in} visits, {result.restarts} restart(s)")
