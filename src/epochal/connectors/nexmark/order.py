"""Bounded out-of-orderness: which event id is emitted in each slot of the stream.

Without it, slot `p` carries event `p`. With `out_of_order_group = g`, the slots are cut into
groups of `g` consecutive slots, and each group carries the same `g` event ids in a
pseudo-random order (Beam's `outOfOrderGroupSize`): an event is emitted at most `g - 1` slots
away from its id, so its event time is at most `g - 1` inter-event delays out of order.

The order within a group is an affine permutation `offset -> (a * offset + b) mod size`, with
`a` coprime to the group's size and `(a, b)` drawn per group from the seed. It is a pure
function of the slot, evaluated pointwise: a split that owns every `n`-th slot, or a reader
resuming in the middle of a group, computes its ids without the rest of the group. (Beam uses
one fixed multiplier, 953, for every group; drawing it per group varies the pattern.)
The last group of a bounded stream may be shorter: it is permuted within its own size.
"""

from __future__ import annotations

import numpy as np

from .counter_random import EventDraws, below, high, low

MAX_GROUP = 1 << 20  # a group size's multipliers are tabulated once: a million of them at most


def _units(size: int) -> np.ndarray:
    """The multipliers that permute `range(size)`: the numbers below `size` coprime to it."""
    if size <= 2:
        return np.ones(1, dtype=np.int64)
    candidates = np.arange(1, size, dtype=np.int64)
    units: np.ndarray = candidates[np.gcd(candidates, size) == 1]
    return units


class EmissionOrder:
    """Maps stream slots to event ids.

    Args:
        key: the stream key of the shuffle (`counter_random.stream_key`).
        group: the out-of-order group size; 1 keeps event-id order.
        events: the stream's length (its last group may be shorter), or None: unbounded.
    """

    __slots__ = ("key", "group", "events", "_units", "_tail", "_tail_units")

    def __init__(self, key: int, group: int, events: int | None) -> None:
        self.key = key
        self.group = group
        self.events = events
        self._units = _units(group)
        self._tail = 0 if events is None else events % group  # the size of a last, shorter group
        self._tail_units = _units(self._tail)

    def event_ids(self, slots: np.ndarray) -> np.ndarray:
        """The event id emitted in each slot (int64 in, int64 out)."""
        if self.group == 1:
            return slots
        groups, offsets = np.divmod(slots, self.group)
        draws = EventDraws(self.key, groups).draw(0)
        sizes = np.full(len(slots), self.group, dtype=np.int64)
        multipliers = self._units[below(high(draws), len(self._units))]
        if self._tail and self.events is not None:
            last = (groups + 1) * self.group > self.events
            if last.any():
                sizes = np.where(last, self._tail, sizes)
                tail_multipliers = self._tail_units[below(high(draws), len(self._tail_units))]
                multipliers = np.where(last, tail_multipliers, multipliers)
        shifts = below(low(draws), sizes)
        ids: np.ndarray = groups * self.group + (multipliers * offsets + shifts) % sizes
        return ids
