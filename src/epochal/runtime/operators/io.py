"""Sources: where records enter a job, each exactly once across failures.

A source keeps its splits' positions as operator state (dissertation §2.2.1, keyed state versus
operator state), so a restore reads each split from where the checkpoint has it (FLIP-27's
split readers; the sinks are in `sink`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from ...errors import OperatorError
from ...plan.specs import OnError, SourceSpec
from ...state.replay import SplitCut
from ..fault_points import fault_point
from ..splits import PendingSplits, discovery_interval, split_move
from ..watermarks import NO_WATERMARK, SplitWatermarks, WatermarkAdvance
from ..wire.batches import batch_len
from ..wire.elements import Batch
from .bad_records import DeadLetter, json_value, with_letters
from .base import OperatorContext, OperatorSnapshot, RuntimeOperator, batch_timestamps, guard
from .source_cuts import SourceCuts

log = logging.getLogger(__name__)

_RETRY_AFTER = 0.01  # `SplitReader.retry_after`'s default, for readers that do not subclass it


@dataclass(slots=True)
class SourcePositions:
    """Operator state of a source subtask: how far each of its splits has been read, and the
    largest timestamp read from each (so its watermark resumes exactly after a restore)."""

    positions: dict[str, Any] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    max_timestamp: dict[str, float] = field(default_factory=dict)
    # nothing left to read and nothing on its way: once every subtask says so in one
    # checkpoint, the job master ends them (`runtime.master.split_handovers`); absent before
    exhausted: bool = False
    # records read from each split not finished: where an epoch replayed after a fallback stops
    # (`state.replay`); absent before
    counts: dict[str, int] = field(default_factory=dict)


class SourceOperator(RuntimeOperator):
    """Reads the splits of a replayable source assigned to this subtask.

    Split `i` of the source's deterministic split list belongs to subtask `i % parallelism`; a
    split's position points just past the last record handed out (dissertation §3.4: source
    state is an offset into a replayable log), so a restore rewinds exactly.

    A source that finds splits as it runs (`discovery_interval()`) is given them by the job
    master's enumerator instead (`assign`, `runtime.master.enumerator`) and is never exhausted.

    Without event time the splits are read one after another, unless a split may never end
    (`endless_splits`, a log's partitions). With a watermark strategy, or such splits, every
    unfinished split is open and they are read a batch each in turn, as Flink reads the
    partitions it is assigned: each split's watermark trails its own timestamps, and the
    subtask's is their minimum (`runtime.watermarks`), so no split runs ahead and turns another's
    records late.

    A source whose splits are in event-time order (`in_order`, e.g. `ParquetSource(in_order=True)`)
    is read one split after another with event time too, its watermark following the split read:
    a split not yet opened holds nothing back, its events coming after the current one's.

    With standby subtasks, a live rescale hands splits over at its rerouting barrier
    (`runtime.splits`: `hand_over`, then `adopt`); such a source (`hands_over`) does not
    end when it has nothing to read, but once told `no_more_splits`.

    After a fallback, it replays the epochs since at their cuts (`source_cuts`, `state.replay`):
    each split read up to the cut, never further, the barrier held (`at_cut`) until all are there.
    """

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self.source = spec.source
        self.spec = spec.watermarks
        self._state = SourcePositions()
        self._splits: list[Any] = []
        self._readers: dict[str, Any] = {}  # open readers, by split id, in reading order
        # readers of finished splits that want to hear of checkpoints, and where they ended: told
        # once a checkpoint after their end completes (FLIP-27 acknowledges finished splits too)
        self._finishing: dict[str, tuple[Any, Any]] = {}
        self._waiting: dict[str, float] = {}  # split id -> when its reader, which had nothing, is due again
        self._turn = 0
        self.discovers = discovery_interval(spec.source) is not None
        self.in_order = getattr(spec.source, "in_order", False) is True
        self.readers = 1  # subtasks that read: split i is subtask i % readers's
        self._index: dict[str, int] = {}  # split id -> its index in the split list (or log)
        self._known: list[Any] = []  # every split known, own or not, for a handover
        self.hands_over = False  # a live rescale may hand it splits (set by the task)
        self.no_more_splits = False  # the job master said none will come: end when read
        self._pending: PendingSplits | None = None  # handed over, read once their checkpoint completed
        self._acks: dict[int, dict[str, Any]] = {}  # checkpoint -> its positions of the open readers
        self._mark = NO_WATERMARK  # the last watermark taken, and whether it said idle
        self._said_idle = False
        self.on_error = spec.on_error
        self._endless = bool(getattr(spec.source, "endless_splits", False))
        self.watermarks: SplitWatermarks | None = (
            SplitWatermarks(spec.watermarks.max_delay, spec.watermarks.idleness) if spec.watermarks else None
        )
        self._cuts = SourceCuts()  # epochs replayed at their cuts, in order

    def open(self, ctx: OperatorContext) -> None:
        super().open(ctx)
        if self.discovers:
            return  # the enumerator assigns them
        with guard(self.name, "<listing the source's splits>"):
            splits = list(self.source.splits())
        self.readers = readers = ctx.parallelism if ctx.active is None else ctx.active  # standby: none
        self._known, self._index = splits, {s.split_id: i for i, s in enumerate(splits)}
        self._splits = [s for i, s in enumerate(splits) if i % readers == ctx.subtask]

    def assign(self, splits: tuple[Any, ...], indices: tuple[int, ...] = ()) -> None:
        """Splits the enumerator found (a restore sends them all again): this subtask's, or,
        with their `indices` in the split log, every subtask's, of which it keeps its own."""
        if indices:
            for split, i in zip(splits, indices):
                if self._index.setdefault(split.split_id, i) == i:
                    self._known.append(split)
            splits = tuple(s for s, i in zip(splits, indices) if i % self.readers == self.ctx.subtask)
        known = {s.split_id for s in self._splits}
        if self._pending is not None:
            known.update(s.split_id for s in self._pending.splits)
        self._splits.extend(s for s in splits if s.split_id not in known)
        if self.watermarks is not None:
            stamps = self._state.max_timestamp
            self.watermarks.restore({s.split_id: stamps[s.split_id] for s in splits if s.split_id in stamps})

    def restore(self, keyed: Any, states: list[Any]) -> None:
        for old in states:  # union: positions of splits this subtask now owns, whoever read them
            if old is None:
                continue
            self._state.positions.update(old.positions)
            self._state.finished |= old.finished
            self._state.max_timestamp.update(getattr(old, "max_timestamp", {}))
            self._state.counts.update(getattr(old, "counts", {}))
        if self.watermarks is not None:
            mine = {s.split_id for s in self._splits}
            self.watermarks.restore({k: v for k, v in self._state.max_timestamp.items() if k in mine})

    @property
    def is_exhausted(self) -> bool:
        return not self._may_get_more() and not self._readers and not self._unopened()

    def _may_get_more(self) -> bool:
        """Whether splits may still come: found by the enumerator, or handed over."""
        return self.discovers or self._pending is not None or (self.hands_over and not self.no_more_splits)

    # -- live rescale (`runtime.splits`) ---------------------------------------------------
    def hand_over(self, checkpoint_id: int, readers: int) -> WatermarkAdvance | None:
        """The rerouting barrier `checkpoint_id` went out, this subtask's snapshot fixed: from
        now on `readers` subtasks read. Give up the splits that are no longer this subtask's,
        and wait for those that are new; the watermark to send now, if any."""
        if not self.hands_over or self.no_more_splits or readers == self.readers:
            return None  # ended sources keep what they read: it is all finished
        move = split_move(self._known, self._index, self.ctx.subtask, self.readers, readers)
        self.readers = readers
        lost = {s.split_id for s in move.lost}
        for split_id in lost:
            if (reader := self._readers.pop(split_id, None)) is not None:
                reader.close()
            self._waiting.pop(split_id, None)
            self._state.positions.pop(split_id, None)
            self._state.max_timestamp.pop(split_id, None)
            self._state.counts.pop(split_id, None)
            if self.watermarks is not None:  # what it no longer reads holds nothing back here
                self.watermarks.max_timestamp.pop(split_id, None)
        self._state.finished -= lost
        self._splits = [s for s in self._splits if s.split_id not in lost]
        if lost:
            fault_point("split_handover.given_up")  # tests: die with splits given up, checkpoint n not complete
        if move.gained:
            self._pending = PendingSplits(checkpoint_id, move.gained)
            if self.watermarks is not None:  # the task sent NO_WATERMARK ahead of the barrier (`gains`)
                self.watermarks.take_back()
                self._mark, self._said_idle = NO_WATERMARK, False
        return self.take_watermark()

    def gains(self, readers: int) -> bool:
        """Whether a switch to `readers` hands this subtask splits. Its watermark may be ahead of
        theirs, and downstream a channel's watermark never goes back, so once their old owner no
        longer held event time back, their records would be late: the task sends NO_WATERMARK
        ahead of the rerouting barrier, which sets its channels back, and its watermark starts
        again from its splits once it has them (`hand_over`)."""
        if not self.hands_over or self.no_more_splits or readers == self.readers or self.watermarks is None:
            return False
        return bool(split_move(self._known, self._index, self.ctx.subtask, self.readers, readers).gained)

    def awaits(self, checkpoint_id: int) -> bool:
        """Whether splits handed over at checkpoint `checkpoint_id` wait for it to complete."""
        return self._pending is not None and self._pending.checkpoint_id == checkpoint_id

    def adopt(self, states: list[Any]) -> tuple[Any, ...]:
        """Their checkpoint completed: take the waiting splits' positions, finished marks and
        watermark stamps from the old owners' `states` (every old subtask's), and read them."""
        assert self._pending is not None
        fault_point("split_handover.adopting")  # tests: die with checkpoint n complete, its splits not taken
        gained, self._pending = self._pending.splits, None
        ids = {s.split_id for s in gained}
        state = self._state
        for old in states:
            if old is None:
                continue
            state.positions.update((k, v) for k, v in old.positions.items() if k in ids)
            state.finished |= old.finished & ids
            state.max_timestamp.update((k, v) for k, v in getattr(old, "max_timestamp", {}).items() if k in ids)
            state.counts.update((k, v) for k, v in getattr(old, "counts", {}).items() if k in ids)
        self._splits = sorted([*self._splits, *gained], key=lambda s: self._index[s.split_id])
        if self.watermarks is not None:
            self.watermarks.restore({k: v for k, v in state.max_timestamp.items() if k in ids})
        return gained

    # -- epochs replayed at their cuts (`state.replay`) ----------------------------------------------
    def replay_to(self, cuts: list[tuple[int, SplitCut]]) -> None:
        """Read no further than each cut, in turn, until its checkpoint's barrier went out."""
        self._cuts.replay_to(cuts)

    def holds(self, checkpoint_id: int) -> bool:
        """Whether checkpoint `checkpoint_id`'s barrier must wait until this source reached its cut."""
        return self._cuts.first_is(checkpoint_id) and not self.at_cut()

    def at_cut(self) -> bool:  # every split where the first cut says (finished, or that many read)
        return self._cuts.reached((s.split_id for s in self._splits), self._state.finished, self._state.counts)

    def cut_passed(self, checkpoint_id: int) -> None:
        self._cuts.passed(checkpoint_id)

    def _room(self, split_id: str) -> int | None:
        return self._cuts.room(split_id, self._state.counts.get(split_id, 0))

    def _unopened(self) -> list[Any]:
        return [s for s in self._splits if s.split_id not in self._state.finished and s.split_id not in self._readers]

    def _open_readers(self) -> None:
        limit = len(self._splits) if (self.watermarks is not None and not self.in_order) or self._endless else 1
        for split in self._unopened()[: max(0, limit - len(self._readers))]:
            with guard(self.name, f"<opening split {split.split_id}>"):
                reader = self.source.open_split(split, self._state.positions.get(split.split_id))
                if self.on_error is not OnError.FAIL and hasattr(reader, "tolerate_bad_input"):
                    reader.tolerate_bad_input()
                self._readers[split.split_id] = reader

    def ready(self, now: float) -> bool:
        """Whether `poll` may have something now: not every open split is waiting for data."""
        waiting = self._waiting
        if self._cuts and self.at_cut():
            return False  # at the cut: the barrier goes first (the task is woken by its trigger)
        if self._may_get_more() and not self._readers and not self._unopened():
            # until a split comes; once to say idle, so it holds no one back meanwhile
            return self.watermarks is not None and self._pending is None and not self._said_idle
        return not waiting or any(waiting.get(split_id, -math.inf) <= now for split_id in self._readers)

    def next_timer(self) -> float | None:
        """When the first waiting split is due again (a host sleeps until then when idle)."""
        return min(self._waiting.values()) if self._waiting else None

    def poll(self, max_records: int) -> Batch | None:
        """The next batch (empty: nothing now), or None once every split of this subtask is exhausted."""
        now = self.ctx.clock.now()
        while True:
            self._open_readers()
            if not self._readers:
                return [] if self._may_get_more() else None
            ids = [i for i in self._readers if self._waiting.get(i, -math.inf) <= now and self._room(i) != 0]
            if not ids:
                return []  # every split waits for data, or is at the cut
            split_id = ids[self._turn % len(ids)]
            self._turn += 1
            reader = self._readers[split_id]
            start = self._state.positions.get(split_id)
            room = self._room(split_id)
            try:
                batch = reader.read(max_records if room is None else min(max_records, room))
            except OperatorError:
                raise
            except Exception as exc:
                raise OperatorError(self.name, f"<split {split_id}>", exc) from exc
            if batch is not None:
                if batch_len(batch):
                    self._waiting.pop(split_id, None)
                else:
                    with guard(self.name, f"<split {split_id}>"):
                        wait = reader.retry_after() if hasattr(reader, "retry_after") else _RETRY_AFTER
                        self._waiting[split_id] = now + max(0.0, float(wait))
                self._state.positions[split_id] = end = reader.position()
                self._state.counts[split_id] = self._state.counts.get(split_id, 0) + batch_len(batch)
                self.ctx.origin.at(split_id, start, end)  # errors downstream in this task name it
                if self.watermarks is not None:
                    self._observe(split_id, batch)
                return with_letters(batch, self._passed_rejects(reader))
            letters = self._passed_rejects(reader)
            self._state.finished.add(split_id)
            self._waiting.pop(split_id, None)
            end = self._state.positions.pop(split_id, None)
            self._state.max_timestamp.pop(split_id, None)
            self._state.counts.pop(split_id, None)
            if hasattr(reader, "notify_checkpoint_complete") and end is not None:
                self._finishing[split_id] = (reader, end)
            else:
                reader.close()
            del self._readers[split_id]
            if letters:
                return letters

    def _passed_rejects(self, reader: Any) -> list[DeadLetter]:
        """The input the reader stepped over since the last read: counted (skip) or dead
        letters (dead_letter), which leave with the batch whose position passed them."""
        rejected = reader.rejected() if self.on_error is not OnError.FAIL and hasattr(reader, "rejected") else ()
        if not rejected:
            return []
        if not self._rejected:  # once per subtask, as for records user code fails on
            self._rejected = True
            log.warning("source %r: %s input that does not parse (%s); on_error=%r", self.name,
                        "skipped" if self.on_error is OnError.SKIP else "dead-lettered", rejected[0].error,
                        self.on_error.value)
        if self.on_error is OnError.SKIP:
            self.skipped_records += len(rejected)
            return []
        return [DeadLetter(self.name, json_value(r.record), r.error, json_value(r.position)) for r in rejected]

    def _observe(self, split_id: str, batch: Batch) -> None:
        """Feed the batch's largest timestamp to its split's watermark."""
        assert self.watermarks is not None and self.spec is not None
        if batch_len(batch) == 0:
            self.watermarks.on_records(split_id, None, self.ctx.clock.now())
            return
        times = batch_timestamps(self.name, self.spec.event_time, batch)
        newest = float(times.max())
        self.watermarks.on_records(split_id, newest, self.ctx.clock.now())
        if newest > self._state.max_timestamp.get(split_id, float("-inf")):
            self._state.max_timestamp[split_id] = newest

    def take_watermark(self) -> WatermarkAdvance | None:
        """The subtask's watermark over its unfinished splits, if it moved since last asked."""
        if self.watermarks is None:
            return None
        if self._pending is not None:  # splits on their way: event time waits for them, here
            return self._took(WatermarkAdvance(self._mark)) if self._said_idle else None
        unfinished = [s.split_id for s in self._splits if s.split_id not in self._state.finished]
        if self.in_order:
            unfinished = unfinished[:1]  # the one being read: the later ones' events come after its
        if not unfinished and self._may_get_more():  # waits for splits: holds no one back meanwhile
            return self._took(self.watermarks.idle())
        return self._took(self.watermarks.advance(unfinished, self.ctx.clock.now()))

    def _took(self, advance: WatermarkAdvance | None) -> WatermarkAdvance | None:
        if advance is not None:
            self._mark, self._said_idle = advance.timestamp, advance.idle
        return advance

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """The progress of this subtask's own splits only. A restore hands every subtask the
        union of the old states, so each split must appear in exactly one of them: a copy kept
        by a subtask that does not read the split would go stale, and win the next union."""
        state = self._state
        mine = {s.split_id for s in self._splits}
        acks = {k: state.positions[k] for k, r in self._readers.items()
                if k in state.positions and hasattr(r, "notify_checkpoint_complete")}
        acks.update((k, end) for k, (_, end) in self._finishing.items())
        if acks:
            self._acks[checkpoint_id] = acks
        return OperatorSnapshot(
            state=SourcePositions(
                {k: v for k, v in state.positions.items() if k in mine},
                state.finished & mine,
                {k: v for k, v in state.max_timestamp.items() if k in mine},
                not self.discovers and self._pending is None and mine <= state.finished,
                {k: v for k, v in state.counts.items() if k in mine},
            )
        )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Tell the readers that want it where the newest complete checkpoint has their split
        (`SplitReader.notify_checkpoint_complete`), once; older checkpoints' entries go."""
        done = [cid for cid in self._acks if cid <= checkpoint_id]
        if not done:
            return
        newest = self._acks[max(done)]
        for cid in done:
            del self._acks[cid]
        for split_id, position in newest.items():
            finishing = self._finishing.get(split_id)
            reader = self._readers.get(split_id) or (finishing[0] if finishing is not None else None)
            if reader is not None:
                with guard(self.name, f"<split {split_id}: checkpoint {checkpoint_id} complete>"):
                    reader.notify_checkpoint_complete(max(done), position)
            if finishing is not None and position == finishing[1]:  # its end is acknowledged: done with it
                del self._finishing[split_id]
                finishing[0].close()

    def close(self) -> None:
        for reader in [*self._readers.values(), *(r for r, _ in self._finishing.values())]:
            reader.close()
        self._readers, self._finishing = {}, {}


