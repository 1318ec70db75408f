"""A source subtask's cuts while the job master replays refused epochs (`state.replay`).

After a fallback to an older checkpoint, each replayed epoch must hold, at the source, exactly the
records the first run's did: its cut says how many records of each split that was (or that the
split was finished). `SourceCuts` keeps the cuts still ahead, in checkpoint order, and answers
the source's questions: how many records a split may still give before the first cut, and
whether every split is there (then the checkpoint's barrier goes, and the next cut applies).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from ...state.replay import SplitCut


class SourceCuts:
    """The cuts ahead of one source subtask, first first."""

    def __init__(self) -> None:
        self._cuts: deque[tuple[int, SplitCut]] = deque()

    def __bool__(self) -> bool:
        return bool(self._cuts)

    def replay_to(self, cuts: Iterable[tuple[int, SplitCut]]) -> None:
        self._cuts = deque(cuts)

    def first_is(self, checkpoint_id: int) -> bool:
        return bool(self._cuts) and self._cuts[0][0] == checkpoint_id

    def reached(self, splits: Iterable[str], finished: set[str], counts: Mapping[str, int]) -> bool:
        """Every split of the subtask is where the first cut says (finished, or that many read)."""
        if not self._cuts:
            return False
        cut = self._cuts[0][1]
        return all(
            split in finished if split in cut.finished else counts.get(split, 0) >= cut.count(split)
            for split in splits
        )

    def passed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id`'s barrier went out: on to the next cut, or read freely."""
        while self._cuts and self._cuts[0][0] <= checkpoint_id:
            self._cuts.popleft()

    def room(self, split: str, read: int) -> int | None:
        """Records `split` (`read` of them read) may still give before the first cut (None: no limit)."""
        if not self._cuts:
            return None
        cut = self._cuts[0][1]
        if split in cut.finished:
            return None
        return max(0, cut.count(split) - read)
