"""How many key groups a live move hands over per checkpoint: steps sized by state.

ChronoStream's evaluation (§V, Fig. 14) shows the pause of a state migration growing with the
state it moves; Megaphone (Hoffmann et al., VLDB 2019) moves bins in batches so that each holds
the stream back less, trading a longer migration for flat latency. A count of groups per step
is the wrong unit for that: 8 of 128 groups of a 10 MB state are nothing, of a 1 GB state a
stall. So a step here carries at most `budget` bytes of state, estimated per key group from the
newest complete checkpoint (a subtask's chain of keyed files spread evenly over the groups it
holds; the chain also holds entries later deltas overwrite, so the estimate errs large and the
steps small), and at least one group. A user's explicit `batch` (groups per step) wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...state.manifest import Manifest


def group_bytes(manifest: Manifest, parallelism: int) -> dict[int, int]:
    """Estimated bytes of keyed state per key group in `manifest`, over the operators that run
    at `parallelism` (the keyed operators a routing table places)."""
    sizes: dict[int, int] = {}
    for operator in manifest.operators:
        if operator.parallelism != parallelism:
            continue
        for subtask in operator.subtasks:
            groups = subtask.holds()
            chain = sum(handle.size for handle in subtask.keyed_chain())
            if not chain or not len(groups):
                continue
            share = chain // len(groups)
            for group in groups:
                sizes[group] = sizes.get(group, 0) + share
    return sizes


def plan_steps(moves: Sequence[tuple[int, int]], batch: int | None, sizes: Mapping[int, int],
               budget: int) -> list[dict[int, int]]:
    """`moves` (key group, new owner) cut into steps in their order: of at most `batch` groups
    if given, else of at most `budget` estimated bytes each (a group larger than it alone);
    `budget` 0, or no estimate, moves them all in one step."""
    if batch is not None:
        size = max(batch, 1)
        return [dict(moves[i:i + size]) for i in range(0, len(moves), size)]
    if budget <= 0 or not sizes:
        return [dict(moves)] if moves else []
    steps: list[dict[int, int]] = []
    step: dict[int, int] = {}
    weight = 0
    for group, owner in moves:
        size = sizes.get(group, 0)
        if step and weight + size > budget:
            steps.append(step)
            step, weight = {}, 0
        step[group] = owner
        weight += size
    if step:
        steps.append(step)
    return steps
