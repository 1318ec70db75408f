"""Epochs replayed at their cuts: what the job master hands the tasks after a fallback.

When the newest complete checkpoint `n` is refused (corrupt beyond repair) and the job restores
an older one, `m`, the sinks may have committed the epochs `m+1 .. n` already. The job then
replays them *at their cuts*: each source subtask reads exactly as many records of each split as
it had read when the first run took checkpoint `k` (`SplitCut`, from checkpoint `k`'s source
states, which outlive a corrupt keyed file or a corrupt manifest with an intact copy), and only
then lets the barrier of checkpoint `k` (the same id) go. With aligned barriers, epoch `k`'s
records at every operator are then those of the first run (ABS: a cut is fixed by the sources'
positions), so a sink idempotent per epoch recognises it as committed and skips it
(`SinkWriter.set_lineage`).

Plain data, carried next to the restored manifest (`Manifest.replay`, not stored) to the tasks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SplitCut:
    """Where one source's splits stood at a checkpoint: records read from each split not
    finished, and the splits finished (read to their end)."""

    counts: tuple[tuple[str, int], ...]
    finished: frozenset[str]

    def count(self, split_id: str) -> int:
        """Records of `split_id` read by the cut (0: not begun)."""
        return dict(self.counts).get(split_id, 0)


@dataclass(frozen=True, slots=True)
class ReplayEpoch:
    """One epoch to replay: checkpoint `checkpoint_id`'s cut, per source operator uid."""

    checkpoint_id: int
    cuts: tuple[tuple[str, SplitCut], ...]


@dataclass(frozen=True, slots=True)
class EpochReplay:
    """The epochs a restored attempt replays at their cuts, in order."""

    epochs: tuple[ReplayEpoch, ...]

    @property
    def checkpoint_ids(self) -> tuple[int, ...]:
        return tuple(e.checkpoint_id for e in self.epochs)

    def cuts_of(self, uid: str) -> list[tuple[int, SplitCut]]:
        """Source `uid`'s cuts, epoch by epoch."""
        return [(e.checkpoint_id, cut) for e in self.epochs for u, cut in e.cuts if u == uid]
