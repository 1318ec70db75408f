"""Tests of `epochal.runtime.wire.channel`: bounded FIFO channels and their statistics."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.runtime.wire.channel import ChannelStatistics, LocalChannel
from epochal.runtime.wire.elements import END_OF_INPUT, Barrier, Watermark


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LocalChannel(0)
    with pytest.raises(ValueError):
        LocalChannel(-3)
    assert LocalChannel(1).capacity == 1


def test_has_capacity_until_full_then_again_after_a_poll() -> None:
    channel = LocalChannel(2, name="a->b")
    assert channel.has_capacity()
    channel.send([1])
    assert channel.has_capacity()
    channel.send([2])
    assert not channel.has_capacity()
    channel.send([3])  # a producer may overshoot by one step's output: send never refuses
    assert not channel.has_capacity() and len(channel) == 3
    channel.poll()
    assert not channel.has_capacity()
    channel.poll()
    assert channel.has_capacity()


def test_empty_channel_polls_none_and_is_falsy() -> None:
    channel = LocalChannel(4)
    assert channel.poll() is None
    assert not channel and len(channel) == 0
    channel.send([])
    assert channel  # an element is there, even an empty batch
    assert channel.poll() == []
    assert not channel


def test_control_elements_travel_in_band_in_order() -> None:
    channel = LocalChannel(8)
    elements = [[1, 2], Barrier(1, 0.0), [3], Watermark(5.0), Barrier(2, 1.0), END_OF_INPUT]
    for e in elements:
        channel.send(e)
    assert [channel.poll() for _ in elements] == elements
    assert channel.poll() is None


_ops = st.lists(st.one_of(st.integers(), st.none()), max_size=60)  # send that int, or poll


@given(_ops, st.integers(1, 5))
@settings(max_examples=200)
def test_fifo_and_statistics_match_a_model(ops: list[int | None], capacity: int) -> None:
    channel = LocalChannel(capacity)
    model: list[int] = []
    sent = 0
    for op in ops:
        if op is not None:
            channel.send([op])
            model.append(op)
            sent += 1
        else:
            got = channel.poll()
            assert got == ([model.pop(0)] if model else None)
        assert len(channel) == len(model)
        assert bool(channel) == bool(model)
        assert channel.has_capacity() == (len(model) < capacity)
        assert channel.statistics() == ChannelStatistics(queued=len(model), capacity=capacity, sent=sent)


def test_statistics_are_a_frozen_snapshot() -> None:
    channel = LocalChannel(3)
    channel.send([1])
    stats = channel.statistics()
    channel.send([2])
    assert stats == ChannelStatistics(1, 3, 1)  # taken before the second send
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.queued = 5  # type: ignore[misc]


def test_channel_is_final_and_slotted() -> None:
    assert getattr(LocalChannel, "__final__", False)  # what typing.final marks, for type checkers
    channel = LocalChannel(1)
    with pytest.raises(AttributeError):
        channel.extra = 1  # type: ignore[attr-defined]
