"""Tests of `epochal.runtime.task.aligner`: barrier alignment (ABS §4.2, Algorithm 1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.runtime.task.aligner import AlignStep, BarrierAligner
from epochal.runtime.wire.elements import END_OF_INPUT, Barrier, EndOfInput


def b(n: int) -> Barrier:
    return Barrier(n, float(n))


def test_single_channel_snapshots_at_once() -> None:
    aligner = BarrierAligner(1)
    assert not aligner.is_aligning
    assert aligner.on_barrier(0, b(1)) is AlignStep.SNAPSHOT
    assert aligner.completed == b(1) and aligner.last_completed == 1
    assert not aligner.is_blocked(0) and not aligner.is_aligning
    assert aligner.on_barrier(0, b(2)) is AlignStep.SNAPSHOT
    assert aligner.last_completed == 2


def test_multi_channel_blocks_each_channel_until_the_last_barrier() -> None:
    aligner = BarrierAligner(3)
    assert aligner.on_barrier(1, b(1)) is AlignStep.CONTINUE
    assert aligner.is_aligning and aligner.pending == b(1)
    assert [aligner.is_blocked(c) for c in range(3)] == [False, True, False]
    assert aligner.on_barrier(0, b(1)) is AlignStep.CONTINUE
    assert [aligner.is_blocked(c) for c in range(3)] == [True, True, False]
    assert aligner.completed is None and aligner.last_completed == 0
    assert aligner.on_barrier(2, b(1)) is AlignStep.SNAPSHOT
    assert [aligner.is_blocked(c) for c in range(3)] == [False, False, False]
    assert aligner.completed == b(1) and aligner.last_completed == 1 and not aligner.is_aligning


def test_end_of_input_counts_as_delivered() -> None:
    aligner = BarrierAligner(2)
    assert aligner.on_end_of_input(1) is AlignStep.CONTINUE  # nothing pending
    assert not aligner.all_ended
    assert aligner.on_barrier(0, b(1)) is AlignStep.SNAPSHOT  # the ended channel does not hold it up
    assert aligner.on_barrier(0, b(2)) is AlignStep.SNAPSHOT


def test_end_of_input_completes_a_pending_alignment() -> None:
    aligner = BarrierAligner(3)
    aligner.on_barrier(0, b(4))
    aligner.on_barrier(1, b(4))
    assert aligner.on_end_of_input(2) is AlignStep.SNAPSHOT
    assert aligner.completed == b(4)
    assert not any(aligner.is_blocked(c) for c in range(3))


def test_a_blocked_channel_that_ends_is_no_longer_blocked() -> None:
    aligner = BarrierAligner(3)
    aligner.on_barrier(0, b(1))
    assert aligner.on_end_of_input(0) is AlignStep.CONTINUE  # still waiting for channels 1 and 2
    assert not aligner.is_blocked(0)
    aligner.on_end_of_input(1)
    assert aligner.on_barrier(2, b(1)) is AlignStep.SNAPSHOT
    aligner.on_end_of_input(2)
    assert aligner.all_ended


def test_a_newer_barrier_abandons_the_pending_one() -> None:
    aligner = BarrierAligner(3)
    aligner.on_barrier(0, b(1))
    aligner.on_barrier(1, b(1))
    # channel 2 never carries barrier 1 (its upstream declined it) and brings 2
    assert aligner.on_barrier(2, b(2)) is AlignStep.CONTINUE
    assert aligner.abandoned == [1]
    assert aligner.pending == b(2)
    assert [aligner.is_blocked(c) for c in range(3)] == [False, False, True]
    assert aligner.on_barrier(0, b(2)) is AlignStep.CONTINUE
    assert aligner.on_barrier(1, b(2)) is AlignStep.SNAPSHOT
    assert aligner.completed == b(2) and aligner.abandoned == [1]


def test_stale_barriers_are_dropped_and_do_not_block() -> None:
    aligner = BarrierAligner(2)
    aligner.on_barrier(0, b(2))
    aligner.on_barrier(1, b(2))
    assert aligner.on_barrier(0, b(2)) is AlignStep.DROP  # already completed
    assert aligner.on_barrier(0, b(1)) is AlignStep.DROP  # older than completed
    assert not aligner.is_blocked(0) and not aligner.is_aligning
    aligner.on_barrier(0, b(5))
    assert aligner.on_barrier(1, b(3)) is AlignStep.DROP  # older than the pending one
    assert not aligner.is_blocked(1) and aligner.pending == b(5) and aligner.abandoned == []
    assert aligner.on_barrier(1, b(5)) is AlignStep.SNAPSHOT


def test_restored_aligner_drops_barriers_up_to_the_restored_checkpoint() -> None:
    aligner = BarrierAligner(1)
    aligner.last_completed = 7  # what Task.open does after a restore
    assert aligner.on_barrier(0, b(7)) is AlignStep.DROP
    assert aligner.on_barrier(0, b(8)) is AlignStep.SNAPSHOT


# -- the property: a snapshot cuts every channel exactly at its barrier --------------------------------
@dataclass
class Channel:
    elements: list[Any]
    pos: int = 0
    processed: list[Any] = field(default_factory=list)
    ended: bool = False

    def before_barrier(self, n: int) -> list[Any] | None:
        """The records sent before barrier n, or None if this channel does not carry it."""
        out = []
        for e in self.elements:
            if isinstance(e, Barrier):
                if e.checkpoint_id == n:
                    return out
            elif not isinstance(e, EndOfInput):
                out.append(e)
        return None

    def records(self) -> list[Any]:
        return [e for e in self.elements if isinstance(e, tuple)]

    def barrier_ids(self) -> set[int]:
        return {e.checkpoint_id for e in self.elements if isinstance(e, Barrier)}


@st.composite
def channel_contents(draw, index: int, k: int, allow_gaps: bool):  # noqa: ANN001, ANN201
    """Records and barriers 1..k in order (some missing if allowed), then maybe end-of-input."""
    elements: list[Any] = []
    serial = 0
    for n in range(1, k + 1):
        for _ in range(draw(st.integers(0, 3))):
            elements.append((index, serial))
            serial += 1
        if not allow_gaps or draw(st.integers(0, 4)) > 0:  # upstream skipped barrier n 1 time in 5
            elements.append(b(n))
    for _ in range(draw(st.integers(0, 3))):
        elements.append((index, serial))
        serial += 1
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(elements)))  # the input may end before the later barriers
        elements = elements[:cut] + [END_OF_INPUT]
    return elements


@st.composite
def scenarios(draw, allow_gaps: bool):  # noqa: ANN001, ANN201
    n = draw(st.integers(1, 4))
    k = draw(st.integers(1, 5))
    return [draw(channel_contents(i, k, allow_gaps)) for i in range(n)]


def drive(contents: list[list[Any]], data: st.DataObject) -> tuple[BarrierAligner, list[Channel], list[int]]:
    """Run the aligner like a task: pick any channel with input that is not blocked, read one element."""
    channels = [Channel(list(c)) for c in contents]
    aligner = BarrierAligner(len(channels))
    snapshots: list[int] = []

    def check_cut(n: int) -> None:
        for ch in channels:
            expected = ch.before_barrier(n)
            if expected is None:  # the channel never carried barrier n: it must have ended
                assert ch.ended, f"snapshot {n} without barrier or end on a channel"
                expected = ch.records()
            assert ch.processed == expected, f"snapshot {n}: channel cut at the wrong place"

    while True:
        readable = [i for i, ch in enumerate(channels) if ch.pos < len(ch.elements) and not aligner.is_blocked(i)]
        if not readable:
            break
        i = data.draw(st.sampled_from(readable), label="read")
        ch = channels[i]
        element = ch.elements[ch.pos]
        ch.pos += 1
        if isinstance(element, Barrier):
            step = aligner.on_barrier(i, element)
            if step is AlignStep.SNAPSHOT:
                assert aligner.completed == element
                check_cut(element.checkpoint_id)
                snapshots.append(element.checkpoint_id)
            elif step is AlignStep.CONTINUE:
                assert aligner.is_blocked(i), "a channel that delivered the pending barrier must block"
                assert aligner.pending == element
            else:
                assert element.checkpoint_id <= max(snapshots + aligner.abandoned + [0]) or (
                    aligner.pending is not None and element.checkpoint_id < aligner.pending.checkpoint_id
                )
        elif isinstance(element, EndOfInput):
            ch.ended = True
            pending = aligner.pending
            if aligner.on_end_of_input(i) is AlignStep.SNAPSHOT:
                assert pending is not None and aligner.completed == pending
                check_cut(pending.checkpoint_id)
                snapshots.append(pending.checkpoint_id)
        else:
            ch.processed.append(element)
    return aligner, channels, snapshots


@given(scenarios(allow_gaps=False), st.data())
@settings(max_examples=300, deadline=None)
def test_every_snapshot_sees_exactly_the_records_before_its_barriers(contents, data) -> None:  # noqa: ANN001
    aligner, channels, snapshots = drive(contents, data)
    # nothing gets stuck: with every barrier on every (non-ended) channel, all input is read
    assert all(ch.pos == len(ch.elements) for ch in channels)
    assert snapshots == sorted(set(snapshots))
    assert aligner.abandoned == []
    # every checkpoint that reached every channel (or whose channels ended) was taken
    k = max((n for ch in channels for n in ch.barrier_ids()), default=0)
    for n in range(1, k + 1):
        if all(n in ch.barrier_ids() or ch.ended for ch in channels) and any(n in ch.barrier_ids() for ch in channels):
            assert n in snapshots
    assert aligner.all_ended == all(ch.ended for ch in channels)


@given(scenarios(allow_gaps=True), st.data())
@settings(max_examples=300, deadline=None)
def test_cuts_stay_exact_when_upstreams_skip_barriers(contents, data) -> None:  # noqa: ANN001
    aligner, channels, snapshots = drive(contents, data)
    assert snapshots == sorted(set(snapshots))  # ids only increase, none twice
    assert not set(snapshots) & set(aligner.abandoned)
    assert aligner.abandoned == sorted(set(aligner.abandoned))
    for n in aligner.abandoned:  # given up only for a newer barrier
        assert any(m > n for ch in channels for m in ch.barrier_ids())
    # a checkpoint every channel carries is never abandoned, and is taken if its barriers arrived
    for n in range(1, 6):
        if all(n in ch.barrier_ids() for ch in channels):
            assert n not in aligner.abandoned
            if all(ch.pos > ch.elements.index(b(n)) for ch in channels):
                assert n in snapshots


def test_a_barrier_that_comes_after_its_checkpoint_was_aborted_blocks_nothing() -> None:
    """Survivors run on (issue 37): checkpoint 3 was aborted because a worker was lost before its
    barrier reached this task; it comes still on a live input, never on the lost one's. Aligned,
    it would hold the live input until a newer checkpoint (none starts before the survivors caught up)."""
    aligner = BarrierAligner(2)
    aligner.aborted(3)
    assert aligner.on_barrier(0, b(3)) is AlignStep.DROP
    assert not aligner.is_blocked(0) and not aligner.is_aligning
    assert aligner.on_barrier(0, b(4)) is AlignStep.CONTINUE and aligner.is_blocked(0)
    assert aligner.on_barrier(1, b(4)) is AlignStep.SNAPSHOT


def test_an_aborted_barrier_that_moves_key_groups_or_patches_is_aligned_still() -> None:
    from dataclasses import replace

    aligner = BarrierAligner(2)
    aligner.aborted(3)
    assert aligner.on_barrier(0, replace(b(3), patch=1)) is AlignStep.CONTINUE and aligner.is_blocked(0)
