"""The bytes of one subtask's snapshot: keyed state indexed by key group, and operator state.

A keyed-state file holds one pickled section per key group and an index at the end, so a
subtask that restores after a rescale reads only the key groups it now owns (dissertation
§4.2.2, state re-allocation). The index records each section's CRC-32 and the trailer the
CRC-32 of the magic and the index, so a reader may fetch the trailer, the index and only the
sections it wants (`RangedBytes`: a live migration's new owner reads a quarter of a subtask's
chain, not all of it) and still load nothing unchecked, as a block-checksummed store does. The
manifest records the file's SHA-256, which a reader of the whole file checks too. The magic at
both ends catches a file of the wrong kind or a truncated one, and the index must tile the
sections exactly, which catches a damaged index offset (the one trailer field no CRC covers).

Two kinds share the framing, told apart by the magic:

- a **full** file: per key group, `{state name: {key: value}}`;
- a **delta** file (incremental checkpoints, ChronoStream §III-B): per key group,
  `{state name: (upserts {key: value}, deleted keys [...])}`: the entries that changed since
  the checkpoint the delta builds on. A restore applies a full file, then its deltas in order.

A section is a sequence of pickles (*frames*), each at most `FRAME_ENTRIES` entries, so that no
single pickling or unpickling call holds the GIL long (a large key group would otherwise stall
the task thread for as long as its section takes: measured ~10 ms per 8,000 entries of 1 KB).
Between frames a string may stand: `"reset"` empties the key group, `"full"` and `"delta"` say
how the frames after it read. A delta's section that replaces its group (`ResetSection`, a live
migration) is written as `"reset"`, then the old owner's sections copied byte for byte, each
after the marker of its file's kind, then `"delta"` and the changes since; it reads back as one
`Replacement`. Older files read as they always did, checked as a whole: `EPKS3`/`EPKD2` (frames,
one CRC-32 over all before the trailer) and, before frames, `EPKS2`/`EPKD1` (one pickle per
section).

Files are produced as a stream of chunks (`iter_keyed_file`), so a large state is never held
twice in memory as one `bytes`.
"""

from __future__ import annotations

import bisect
import io
import itertools
import pickle
import struct
import zlib
from collections.abc import Container, Iterable, Iterator
from typing import Any, Protocol

from ..errors import CorruptCheckpointError
from .moved_modules import loads_moved
from .sections import EncodedSection, Replacement, ResetSection

_MAGIC = b"EPKS4\n"
_DELTA_MAGIC = b"EPKD3\n"
# how a file is checked and its sections read, by its magic
_SECTIONS, _WHOLE, _SINGLE = "sections", "whole", "single"  # CRC per section; one CRC; one CRC, one pickle
_KINDS = {_MAGIC: (False, _SECTIONS), _DELTA_MAGIC: (True, _SECTIONS), b"EPKS3\n": (False, _WHOLE),
          b"EPKD2\n": (True, _WHOLE), b"EPKS2\n": (False, _SINGLE), b"EPKD1\n": (True, _SINGLE)}
# index offset, CRC-32 (of the magic and the index; in older files of all before the trailer), magic again
_TRAILER = struct.Struct("<QI6s")
_PICKLE_PROTOCOL = 5
FRAME_ENTRIES = 4096  # entries per frame at most (see the module docstring)
_RESET, _FULL, _DELTA = "reset", "full", "delta"


def encode_keyed_state(groups: dict[int, dict[str, dict[Any, Any]]]) -> bytes:
    """Serialise keyed state (key group → state name → {key: value})."""
    return b"".join(iter_keyed_file(sorted(groups.items())))


def iter_keyed_file(sections: Iterable[tuple[int, Any]], *, delta: bool = False) -> Iterator[bytes]:
    """Chunks of a keyed-state file from `(key group, section)` pairs in ascending key group; a
    delta's section may be a `ResetSection`."""
    magic = _DELTA_MAGIC if delta else _MAGIC
    yield magic
    offset = len(magic)
    index: dict[int, tuple[int, int, int]] = {}  # key group: (offset, length, CRC-32 of the section)
    for key_group, section in sections:
        start, crc = offset, 0
        for blob in _section_frames(section, delta):
            crc = zlib.crc32(blob, crc)
            offset += len(blob)
            yield blob
        index[key_group] = (start, offset - start, crc)
    tail = pickle.dumps(index, protocol=_PICKLE_PROTOCOL)
    yield tail
    yield _TRAILER.pack(offset, zlib.crc32(tail, zlib.crc32(magic)), magic)


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=_PICKLE_PROTOCOL)


def _section_frames(section: Any, delta: bool) -> Iterator[bytes]:
    if not isinstance(section, ResetSection):
        yield from _frames(section, delta)
        return
    if not delta:
        raise ValueError("a key group is replaced only in a delta file")
    yield _dumps(_RESET)
    for copy in section.copies:
        yield _dumps(_DELTA if copy.is_delta else _FULL)
        yield copy.data  # verbatim: frames and markers of their own, read in order
    if section.delta:
        if section.copies:
            yield _dumps(_DELTA)
        yield from _frames(section.delta, True)


def encode_sections(sections: Iterable[tuple[int, Any]], *, delta: bool) -> list[tuple[int, Any]]:
    """`sections` with their entries pickled now (`EncodedSection`; a `ResetSection` keeps its
    copies, which are bytes already): `iter_keyed_file` writes them as it would have the live
    entries, and nothing refers to those any more."""
    out: list[tuple[int, Any]] = []
    for key_group, section in sections:
        if isinstance(section, ResetSection):
            encoded = EncodedSection(tuple(_frames(section.delta, True))) if section.delta else None
            out.append((key_group, ResetSection(section.copies, encoded)))
        else:
            out.append((key_group, EncodedSection(tuple(_frames(section, delta)))))
    return out


def _frames(states: dict[str, Any] | EncodedSection, delta: bool) -> Iterator[bytes]:
    """One section's states as frames of at most `FRAME_ENTRIES` entries (one frame if small)."""
    if isinstance(states, EncodedSection):
        yield from states.frames
        return
    sizes = [len(v[0]) + len(v[1]) if delta else len(v) for v in states.values()]
    if sum(sizes) <= FRAME_ENTRIES:
        yield _dumps(states)
        return
    for name, value in states.items():
        if delta:
            upserts, deleted = value
            for part in _parts(upserts):
                yield _dumps({name: (part, [])})
            for start in range(0, len(deleted), FRAME_ENTRIES):
                yield _dumps({name: ({}, list(deleted[start:start + FRAME_ENTRIES]))})
        else:
            for part in _parts(value):
                yield _dumps({name: part})


def _parts(entries: dict[Any, Any]) -> Iterator[dict[Any, Any]]:
    if len(entries) <= FRAME_ENTRIES:
        yield entries
        return
    items = iter(entries.items())
    while part := dict(itertools.islice(items, FRAME_ENTRIES)):
        yield part


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


class RangedBytes(Protocol):
    """A file's bytes, read a range at a time (`CheckpointStorage.open_ranged`)."""

    def __len__(self) -> int: ...

    def slice(self, start: int, end: int) -> bytes: ...

    def crc(self, end: int) -> int: ...

    def release(self) -> None: ...


class _Pieces:
    """A file's bytes, whole or as chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.starts = [0]
        for chunk in chunks:
            self.starts.append(self.starts[-1] + len(chunk))

    def __len__(self) -> int:
        return self.starts[-1]

    def slice(self, start: int, end: int) -> bytes:
        """Bytes `[start, end)`, copied (joined where they span chunks)."""
        i = bisect.bisect_right(self.starts, start) - 1
        parts = []
        while start < end:
            offset = start - self.starts[i]
            take = min(end - start, len(self.chunks[i]) - offset)
            parts.append(self.chunks[i][offset:offset + take])
            start += take
            i += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def crc(self, end: int) -> int:
        crc = 0
        for chunk, at in zip(self.chunks, self.starts, strict=False):
            if at >= end:
                break
            crc = zlib.crc32(memoryview(chunk)[: end - at], crc)
        return crc

    def release(self) -> None:
        """Free the chunks one at a time: freeing hundreds of MB in one go (one munmap per
        chunk, in one deallocation cascade) holds the GIL for tens of milliseconds."""
        while self.chunks:
            self.chunks.pop()


class KeyedFile:
    """A keyed-state file, checked (magic, CRC-32, index), its sections not yet decoded: a
    reader decodes the key groups it wants, and may keep a section's bytes (`raw`) to copy.
    Over `RangedBytes` only the trailer, the index and the sections asked for are read, each
    checked against its CRC-32 (an older file, without them, is read and checked whole).
    `release` frees the file's bytes, or closes it (the sections read stay)."""

    def __init__(self, data: bytes | list[bytes] | RangedBytes, *, source: str = "<bytes>") -> None:
        self.source = source
        pieces: RangedBytes = _Pieces([data]) if isinstance(data, bytes) else \
            _Pieces(data) if isinstance(data, list) else data
        size = len(pieces)
        try:
            head = pieces.slice(0, min(size, len(_MAGIC)))
            kind = next((m for m in _KINDS if head.startswith(m)), None)
            if kind is None or size < len(kind) + _TRAILER.size:
                raise ValueError("not a keyed-state file")
            index_offset, crc, magic = _TRAILER.unpack(pieces.slice(size - _TRAILER.size, size))
            if magic != kind:
                raise ValueError("trailer missing (truncated?)")
            if not len(kind) <= index_offset <= size - _TRAILER.size:
                raise ValueError("index offset out of the file (damaged index offset?)")
            self.is_delta, layout = _KINDS[kind]
            tail = pieces.slice(index_offset, size - _TRAILER.size)
            checked = zlib.crc32(tail, zlib.crc32(kind)) if layout == _SECTIONS else pieces.crc(size - _TRAILER.size)
            if checked != crc:
                raise ValueError("CRC-32 mismatch")
            index: dict[int, tuple[int, ...]] = pickle.loads(tail)
            _check_index(index, len(kind), index_offset, 3 if layout == _SECTIONS else 2)
        except Exception as exc:  # pickle raises many kinds on garbage
            pieces.release()
            raise CorruptCheckpointError(f"{source}: unreadable keyed state ({exc})") from exc
        self._pieces = pieces
        self.index = index
        self._single_frame = layout == _SINGLE

    def release(self) -> None:
        self._pieces.release()

    def groups(self, wanted: Container[int] | None = None) -> list[int]:
        """The key groups with a section here, of those in `wanted` (all when None)."""
        return [g for g in self.index if wanted is None or g in wanted]

    def raw(self, key_group: int) -> bytes:
        """The section of `key_group`, as bytes (a copy of them: the file may be freed), checked
        against its CRC-32 where the file records one."""
        start, length, *crc = self.index[key_group]
        blob = self._pieces.slice(start, start + length)
        if crc and zlib.crc32(blob) != crc[0]:
            raise CorruptCheckpointError(
                f"{self.source}: unreadable keyed state (key group {key_group}'s section fails its CRC-32)")
        return blob

    def decode(self, key_group: int, raw: bytes | None = None) -> Any:
        """The section of `key_group` (from `raw`, its bytes, if the caller has them):
        `{state: entries}` in a full file; in a delta `{state: (upserts, deleted keys)}`, or a
        `Replacement`."""
        try:
            blob = self.raw(key_group) if raw is None else raw
            if self._single_frame:
                return pickle.loads(blob)
            return decode_section(blob, self.is_delta)
        except CorruptCheckpointError:
            raise
        except Exception as exc:  # pickle raises many kinds on garbage
            raise CorruptCheckpointError(f"{self.source}: unreadable keyed state ({exc})") from exc


def decode_section(blob: bytes, is_delta: bool) -> Any:
    """Fold a section's frames (module docstring) into what one pickle of it would have been."""
    stream = io.BytesIO(blob)

    def load() -> Any:
        return pickle.load(stream)  # an unpickler per frame: each was pickled with a memo of its own

    first = load()
    if stream.tell() == len(blob) and isinstance(first, dict):
        return first  # one frame, the file's own kind: as it was written
    fold = _Fold(is_delta)
    fold.add(first)
    while stream.tell() < len(blob):
        fold.add(load())
    return fold.result()


class _Fold:
    """Frames and markers applied in order: upserts (or a key group's content once reset) and
    deletions per state."""

    def __init__(self, is_delta: bool) -> None:
        self.file_is_delta = self.is_delta = is_delta
        self.reset = False
        self.entries: dict[str, dict[Any, Any]] = {}
        self.deleted: dict[str, set[Any]] = {}

    def add(self, frame: Any) -> None:
        if isinstance(frame, str):
            self._marker(frame)
            return
        if not isinstance(frame, dict):
            raise ValueError(f"a section frame of type {type(frame).__name__}")
        for name, payload in frame.items():
            entries = self.entries.setdefault(name, {})
            deleted = self.deleted.get(name)
            if self.is_delta:
                upserts, gone = payload
                if gone:
                    deleted = self.deleted.setdefault(name, set())
                    for key in gone:
                        entries.pop(key, None)
                    deleted.update(gone)
            else:
                upserts = payload
            entries.update(upserts)
            if deleted:
                deleted.difference_update(upserts)

    def _marker(self, marker: str) -> None:
        if marker == _RESET and self.file_is_delta:
            self.reset = True
            self.entries.clear()
            self.deleted.clear()
        elif marker in (_FULL, _DELTA):
            self.is_delta = marker == _DELTA
        else:
            raise ValueError(f"an unknown section marker {marker!r}")

    def result(self) -> Any:
        if not self.file_is_delta:
            return {name: entries for name, entries in self.entries.items() if entries}
        if self.reset:
            return Replacement({name: entries for name, entries in self.entries.items() if entries})
        names = self.entries.keys() | self.deleted.keys()
        return {name: (self.entries.get(name, {}), list(self.deleted.get(name, ()))) for name in names}


def decode_keyed_file(
    data: bytes, wanted: Container[int] | None = None, *, source: str = "<bytes>"
) -> tuple[bool, dict[int, Any]]:
    """`(is_delta, key group → section)` for the key groups in `wanted` (all when None)."""
    file = KeyedFile(data, source=source)
    return file.is_delta, {g: file.decode(g) for g in file.groups(wanted)}


def _check_index(index: Any, start: int, end: int, fields: int) -> None:
    """The index must be `{key group: (offset, length[, CRC-32])}` whose sections tile `[start,
    end)`, as `iter_keyed_file` writes them: per key group, O(key groups), never per entry."""
    if not isinstance(index, dict) or not all(isinstance(e, tuple) and len(e) == fields for e in index.values()):
        raise ValueError("index is not a mapping of sections (damaged index offset?)")
    position = start
    for offset, length, *_ in sorted(index.values()):
        if offset != position or not isinstance(length, int) or length <= 0:
            raise ValueError("index does not tile the file (damaged index offset?)")
        position += length
    if position != end or not all(isinstance(kg, int) for kg in index):
        raise ValueError("index does not tile the file (damaged index offset?)")


def encode_operator_state(state: Any) -> bytes:
    return pickle.dumps(state, protocol=_PICKLE_PROTOCOL)


def decode_operator_state(data: bytes, *, source: str = "<bytes>") -> Any:
    try:
        try:
            return pickle.loads(data)
        except (ModuleNotFoundError, AttributeError):  # written before a module moved (`moved_modules`)
            return loads_moved(data)
    except Exception as exc:
        raise CorruptCheckpointError(f"{source}: unreadable operator state ({exc})") from exc
