"""Expected outputs shared by tests of different layers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any


def running_counts(keys: Iterable[Any]) -> list[tuple[Any, int]]:
    """Every `(key, running count)` a keyed count emits for `keys`, sorted by repr."""
    seen: Counter[Any] = Counter()
    out = []
    for k in keys:
        seen[k] += 1
        out.append((k, seen[k]))
    return sorted(out, key=repr)
