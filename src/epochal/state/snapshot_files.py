"""The bytes of one subtask's snapshot: keyed state indexed by key group, and operator state.

A keyed-state file holds one pickled section per key group and an index at the end, so a
subtask that restores after a rescale reads only the key groups it now owns (dissertation
§4.2.2, state re-allocation). The file carries its own CRC-32 (in the trailer) over everything
before the trailer, and the manifest records its SHA-256; the magic at both ends catches a file
of the wrong kind or a truncated one, and the index must tile the sections exactly, which
catches a damaged index offset (the one trailer field the CRC does not cover).

Two kinds share the framing, told apart by the magic:

- a **full** file: per key group, `{state name: {key: value}}`;
- a **delta** file (incremental checkpoints, ChronoStream §III-B): per key group,
  `{state name: (upserts {key: value}, deleted keys [...])}`: the entries that changed since
  the checkpoint the delta builds on. A restore applies a full file, then its deltas in order.

Files are produced as a stream of chunks (`iter_keyed_file`), so a large state is never held
twice in memory as one `bytes`.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from collections.abc import Container, Iterable, Iterator
from typing import Any

from ..errors import CorruptCheckpointError

_MAGIC = b"EPKS2\n"
_DELTA_MAGIC = b"EPKD1\n"
_TRAILER = struct.Struct("<QI6s")  # index offset, CRC-32 of all before, magic again
_PICKLE_PROTOCOL = 5


def encode_keyed_state(groups: dict[int, dict[str, dict[Any, Any]]]) -> bytes:
    """Serialise keyed state (key group → state name → {key: value})."""
    return b"".join(iter_keyed_file(sorted(groups.items())))


def iter_keyed_file(sections: Iterable[tuple[int, Any]], *, delta: bool = False) -> Iterator[bytes]:
    """Chunks of a keyed-state file from `(key group, section)` pairs in ascending key group."""
    magic = _DELTA_MAGIC if delta else _MAGIC
    yield magic
    offset, crc = len(magic), zlib.crc32(magic)
    index: dict[int, tuple[int, int]] = {}
    for key_group, section in sections:
        blob = pickle.dumps(section, protocol=_PICKLE_PROTOCOL)
        index[key_group] = (offset, len(blob))
        crc = zlib.crc32(blob, crc)
        offset += len(blob)
        yield blob
    tail = pickle.dumps(index, protocol=_PICKLE_PROTOCOL)
    crc = zlib.crc32(tail, crc)
    yield tail
    yield _TRAILER.pack(offset, crc, magic)


def encode_keyed_delta(groups: dict[int, dict[str, tuple[dict[Any, Any], list[Any]]]]) -> bytes:
    """Serialise a delta (key group → state name → (upserts, deleted keys))."""
    return b"".join(iter_keyed_file(sorted(groups.items()), delta=True))


def decode_keyed_state(
    data: bytes, wanted: Container[int] | None = None, *, source: str = "<bytes>"
) -> dict[int, dict[str, dict[Any, Any]]]:
    """Read the key groups in `wanted` (all when None) back from `encode_keyed_state` bytes."""
    is_delta, groups = decode_keyed_file(data, wanted, source=source)
    if is_delta:
        raise CorruptCheckpointError(f"{source}: a delta file where a full keyed-state file was expected")
    return groups


def decode_keyed_file(
    data: bytes, wanted: Container[int] | None = None, *, source: str = "<bytes>"
) -> tuple[bool, dict[int, Any]]:
    """`(is_delta, key group → section)` for the key groups in `wanted` (all when None)."""
    try:
        if data.startswith(_MAGIC):
            expected = _MAGIC
        elif data.startswith(_DELTA_MAGIC):
            expected = _DELTA_MAGIC
        else:
            raise ValueError("not a keyed-state file")
        if len(data) < len(expected) + _TRAILER.size:
            raise ValueError("not a keyed-state file")
        index_offset, crc, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
        if magic != expected:
            raise ValueError("trailer missing (truncated?)")
        if zlib.crc32(memoryview(data)[: -_TRAILER.size]) != crc:
            raise ValueError("CRC-32 mismatch")
        index: dict[int, tuple[int, int]] = pickle.loads(data[index_offset : -_TRAILER.size])
        _check_index(index, len(expected), index_offset)
        out = {}
        for key_group, (start, length) in index.items():
            if wanted is None or key_group in wanted:
                out[key_group] = pickle.loads(data[start : start + length])
        return expected == _DELTA_MAGIC, out
    except Exception as exc:  # pickle raises many kinds on garbage
        raise CorruptCheckpointError(f"{source}: unreadable keyed state ({exc})") from exc


def _check_index(index: Any, start: int, end: int) -> None:
    """The index must be `{key group: (offset, length)}` whose sections tile `[start, end)`, as
    `iter_keyed_file` writes them: per key group, O(key groups), never per entry."""
    if not isinstance(index, dict):
        raise ValueError("index is not a mapping (damaged index offset?)")
    position = start
    for offset, length in sorted(index.values()):
        if offset != position or not isinstance(length, int) or length <= 0:
            raise ValueError("index does not tile the file (damaged index offset?)")
        position += length
    if position != end or not all(isinstance(kg, int) for kg in index):
        raise ValueError("index does not tile the file (damaged index offset?)")


def encode_operator_state(state: Any) -> bytes:
    return pickle.dumps(state, protocol=_PICKLE_PROTOCOL)


def decode_operator_state(data: bytes, *, source: str = "<bytes>") -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise CorruptCheckpointError(f"{source}: unreadable operator state ({exc})") from exc
