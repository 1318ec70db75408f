"""The bytes of one subtask's snapshot: keyed state indexed by key group, and operator state.

A keyed-state file holds one pickled section per key group and an index at the end, so a
subtask that restores after a rescale reads only the key groups it now owns (dissertation §4.2,
range re-allocation, L3293). The file carries its own CRC-32 (in the trailer), and the manifest
records its SHA-256; the magic at both ends catches a file of the wrong kind or a truncated one.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from typing import Any

from ..errors import CorruptCheckpointError

_MAGIC = b"EPKS2\n"
_TRAILER = struct.Struct("<QI6s")  # index offset, CRC-32 of all before, magic again
_PICKLE_PROTOCOL = 5


def encode_keyed_state(groups: dict[int, dict[str, dict[Any, Any]]]) -> bytes:
    """Serialise keyed state (key group → state name → {key: value})."""
    parts = [_MAGIC]
    offset = len(_MAGIC)
    index: dict[int, tuple[int, int]] = {}
    for key_group in sorted(groups):
        blob = pickle.dumps(groups[key_group], protocol=_PICKLE_PROTOCOL)
        index[key_group] = (offset, len(blob))
        parts.append(blob)
        offset += len(blob)
    parts.append(pickle.dumps(index, protocol=_PICKLE_PROTOCOL))
    body = b"".join(parts)
    return body + _TRAILER.pack(offset, zlib.crc32(body), _MAGIC)


def decode_keyed_state(
    data: bytes, wanted: range | None = None, *, source: str = "<bytes>"
) -> dict[int, dict[str, dict[Any, Any]]]:
    """Read the key groups in `wanted` (all when None) back from `encode_keyed_state` bytes."""
    try:
        if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + _TRAILER.size:
            raise ValueError("not a keyed-state file")
        index_offset, crc, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
        if magic != _MAGIC:
            raise ValueError("trailer missing (truncated?)")
        if zlib.crc32(memoryview(data)[: -_TRAILER.size]) != crc:
            raise ValueError("CRC-32 mismatch")
        index: dict[int, tuple[int, int]] = pickle.loads(data[index_offset : -_TRAILER.size])
        out = {}
        for key_group, (start, length) in index.items():
            if wanted is None or key_group in wanted:
                out[key_group] = pickle.loads(data[start : start + length])
        return out
    except Exception as exc:  # pickle raises many kinds on garbage
        raise CorruptCheckpointError(f"{source}: unreadable keyed state ({exc})") from exc


def encode_operator_state(state: Any) -> bytes:
    return pickle.dumps(state, protocol=_PICKLE_PROTOCOL)


def decode_operator_state(data: bytes, *, source: str = "<bytes>") -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise CorruptCheckpointError(f"{source}: unreadable operator state ({exc})") from exc
