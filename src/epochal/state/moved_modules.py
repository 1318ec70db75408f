"""Operator state written before a module of the package moved: where its types live now.

Operator snapshots pickle some runtime types by their module's path (an unaligned checkpoint's
in-flight log holds `InFlight` and in-band elements, a source its split positions). When a
module moves, a checkpoint taken before the move must still restore, as Flink keeps reading
savepoints across versions: a pickle that names an old path is read again with the new one.
The names are plain strings, so `state` imports nothing of the runtime.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

# old module path -> new one (0.1: runtime/ became the wings master/, task/ and wire/)
MOVED: dict[str, str] = {
    "epochal.runtime.elements": "epochal.runtime.wire.elements",
    "epochal.runtime.batches": "epochal.runtime.wire.batches",
    "epochal.runtime.messages": "epochal.runtime.wire.messages",
    "epochal.runtime.in_flight": "epochal.runtime.channel_state",
    "epochal.runtime.split_handover": "epochal.runtime.splits",
    "epochal.runtime.columnar_count": "epochal.runtime.operators.columnar_count",
}

# (old module path, name) -> the module that holds it now, for a type that left a module that stays
MOVED_NAMES: dict[tuple[str, str], str] = {
    ("epochal.runtime.operators.windows", "LateRecord"): "epochal.runtime.operators.window_output",
    ("epochal.runtime.operators.windows", "Window"): "epochal.plan.windows",
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_NAMES.get((module, name), MOVED.get(module, module)), name)


def loads_moved(data: bytes) -> Any:
    """`pickle.loads`, reading old module paths as their new ones (after a plain load failed)."""
    return _Unpickler(io.BytesIO(data)).load()
