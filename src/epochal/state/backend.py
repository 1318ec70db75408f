"""Former home of the heap backend, now split; kept only for importers not yet switched.

The heap backend is in `heap.py`, incremental tracking in `incremental.py`, `apply_sections` in
`sections.py`, and the contract both backends implement in `contract.py`. Delete this module once
nothing imports it (`runtime/operators/base.py` and `runtime/operators/keyed.py` did).
"""

from __future__ import annotations

from .heap import HeapKeyedStateBackend
from .heap import HeapSnapshot as KeyedStateSnapshot
from .incremental import IncrementalTracker
from .sections import apply_sections

__all__ = ["HeapKeyedStateBackend", "IncrementalTracker", "KeyedStateSnapshot", "apply_sections"]
