"""Which state values a snapshot may share with the live state, and private copies of the rest.

Both backends hand out values their callers may change in place (a `ListState`'s list, a mutable
`ValueState` value). A value nothing can change in place is safe to share, with a snapshot (heap
backend: copy-on-write) or with another key (a handle's default); any other is copied first.
"""

from __future__ import annotations

import copy
from typing import Any

# Values of these types can be shared with a snapshot: nothing can change them in place.
IMMUTABLE = (int, float, str, bytes, bool, type(None), complex, frozenset)
# The same, matched by exact type: one set lookup in the per-record loops (object: sentinels).
IMMUTABLE_EXACT = frozenset((int, float, str, bytes, bool, type(None), complex, frozenset, object))


def is_immutable(value: Any) -> bool:
    """Whether nothing can change `value` in place (tuples count if every item does)."""
    t = type(value)
    if t in IMMUTABLE_EXACT:  # the common case, one set lookup
        return True
    if t is tuple:  # checked for every key once per checkpoint: a plain loop, no generator
        for item in value:
            if type(item) not in IMMUTABLE_EXACT and not is_immutable(item):
                return False
        return True
    return isinstance(value, IMMUTABLE)


def private(value: Any) -> Any:
    """`value` itself if immutable, else a deep copy nobody else holds."""
    return value if is_immutable(value) else copy.deepcopy(value)
