"""Two-input operators driven as their tasks drive them, without a job: subtasks over a split of
the key groups, batches routed by key group (as a keyed shuffle does), watermarks to every
subtask, and snapshots restored into a new split (a restore at another parallelism).

What comes out is split as the job's splits would split it: results, and each side output's
records by tag.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from typing import Any

from epochal.config import StateConfig
from epochal.runtime.clock import VirtualClock
from epochal.runtime.keys import record_key_fn
from epochal.runtime.operators import OperatorContext, create_operator
from epochal.runtime.operators.bad_records import DeadLetter
from epochal.runtime.operators.side_outputs import Tagged
from epochal.runtime.wire.batches import to_records
from epochal.state.keygroups import key_group_of, key_group_range

MAX_PARALLELISM = 16


class Output:
    """What the subtasks emitted: results, tagged records by tag, and dead letters."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        self.tagged: dict[str, list[Any]] = defaultdict(list)
        self.letters: list[DeadLetter] = []

    def add(self, batch: Any) -> None:
        if batch is None:
            return
        for record in to_records(batch):
            if type(record) is Tagged:
                self.tagged[record.tag].append(record.record)
            elif type(record) is DeadLetter:
                self.letters.append(record)
            else:
                self.results.append(record)


class Subtasks:
    """`parallelism` running instances of one two-input operator spec, fed by key group.

    Args:
        spec: the operator's spec.
        keys: the key selectors of input 0 and input 1 (None: a broadcast input, to every subtask).
        parallelism: how many subtasks split the key groups.
        restored: `(keyed state by key group, operator states)` of a snapshot, or None.
        backend: "memory" or "disk".
    """

    def __init__(self, spec: Any, keys: tuple[Any, Any], parallelism: int, restored: Any = None,
                 backend: str = "memory", tmp: str | None = None) -> None:
        self.spec, self.keys, self.parallelism = spec, keys, parallelism
        self.output = Output()
        self.ops = []
        self.checkpoints = 0
        for i in range(parallelism):
            groups = key_group_range(i, parallelism, MAX_PARALLELISM)
            op = create_operator(spec)
            state = StateConfig(backend=backend, local_dir=tmp)  # type: ignore[arg-type]
            op.open(OperatorContext(i, parallelism, MAX_PARALLELISM, groups, VirtualClock(), state, f"t{i}"))
            if restored is None:
                op.restore(None, [])
                op.start([])
            else:
                keyed, states = restored
                op.restore({g: v for g, v in keyed.items() if g in groups}, states)
                op.start(states)  # the user's function opens after its state is back (as the chain does)
            self.ops.append(op)

    def feed(self, side: int, records: list[Any]) -> None:
        """A batch of input `side`, cut into one batch per subtask by key group (order kept)."""
        key = self.keys[side]
        parts: dict[int, list[Any]] = defaultdict(list)
        if key is None:
            for i in range(self.parallelism):
                parts[i] = list(records)
        else:
            fn = record_key_fn(key)
            for record in records:
                group = key_group_of(fn(record), MAX_PARALLELISM)
                subtask = next(i for i, op in enumerate(self.ops) if group in op.ctx.key_groups)
                parts[subtask].append(record)
        for i, batch in sorted(parts.items()):
            op = self.ops[i]
            self.output.add(op.process(batch) if side == 0 else op.process_second(batch))

    def watermark(self, watermark: float) -> None:
        for op in self.ops:
            self.output.add(op.on_watermark(watermark))

    def snapshot(self) -> tuple[dict[int, Any], list[Any]]:
        """Every subtask's state, pickled and read back as a restore would read it."""
        self.checkpoints += 1
        keyed: dict[int, Any] = {}
        states = []
        for op in self.ops:
            snap = op.snapshot(self.checkpoints)
            if snap.keyed is not None:
                keyed.update(pickle.loads(pickle.dumps(dict(snap.keyed.full_sections()))))
            states.append(pickle.loads(pickle.dumps(snap.state)))
            op.on_snapshot_written(self.checkpoints, None)
        return keyed, states

    def close(self) -> None:
        for op in self.ops:
            op.close()
