"""A reader of a few key groups reads only their sections, each checked by its own CRC-32."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochal.errors import CorruptCheckpointError
from epochal.state.checked_files import RangedFile
from epochal.state.snapshot_files import KeyedFile, encode_keyed_state
from epochal.state.storage import CheckpointStorage

GROUPS = {g: {"s": {f"k{i}": bytes(200) + g.to_bytes(2, "little") for i in range(100)}} for g in range(16)}


class _Counted:
    """A `RangedFile` that counts the bytes it was asked for."""

    def __init__(self, inner: RangedFile) -> None:
        self.inner, self.read = inner, 0

    def __len__(self) -> int:
        return len(self.inner)

    def slice(self, start: int, end: int) -> bytes:
        self.read += end - start
        return self.inner.slice(start, end)

    def crc(self, end: int) -> int:
        self.read += end
        return self.inner.crc(end)

    def release(self) -> None:
        self.inner.release()


def _stored(tmp_path: Path, data: bytes) -> tuple[CheckpointStorage, object]:
    storage = CheckpointStorage(str(tmp_path))
    return storage, storage.write("chk-1/keyed-0", data)


def test_a_ranged_reader_reads_the_index_and_its_sections_only(tmp_path: Path) -> None:
    data = encode_keyed_state(GROUPS)
    storage, handle = _stored(tmp_path, data)
    opened = storage.open_ranged(handle)
    assert isinstance(opened, RangedFile)
    counted = _Counted(opened)
    file = KeyedFile(counted, source="keyed-0")
    assert {g: file.decode(g) for g in (3, 11)} == {3: GROUPS[3], 11: GROUPS[11]}
    file.release()
    sections = sum(file.index[g][1] for g in (3, 11))
    assert sections < counted.read < sections + len(data) // 8  # two of 16 sections, the index, the trailer


def test_a_damaged_section_is_caught_when_read_and_the_others_still_read(tmp_path: Path) -> None:
    data = bytearray(encode_keyed_state(GROUPS))
    index = KeyedFile(bytes(data)).index
    start, length, _ = index[5]
    data[start + length // 2] ^= 1
    storage, handle = _stored(tmp_path, bytes(data))
    file = KeyedFile(storage.open_ranged(handle), source="keyed-0")
    assert file.decode(6) == GROUPS[6]
    with pytest.raises(CorruptCheckpointError, match="key group 5's section fails its CRC-32"):
        file.raw(5)
    with pytest.raises(CorruptCheckpointError, match="CRC-32"):
        file.decode(5)
    file.release()


def test_a_damaged_index_or_a_truncated_file_is_caught_before_any_section(tmp_path: Path) -> None:
    data = encode_keyed_state(GROUPS)
    index_offset = len(data) - 18 - 20  # inside the pickled index
    damaged = bytearray(data)
    damaged[index_offset] ^= 1
    storage, handle = _stored(tmp_path, bytes(damaged))
    with pytest.raises(CorruptCheckpointError, match="keyed-0"):
        KeyedFile(storage.open_ranged(handle), source="keyed-0")
    _, whole = _stored(tmp_path / "t", data)
    (tmp_path / "t" / "chk-1" / "keyed-0").write_bytes(data[:-1])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        CheckpointStorage(str(tmp_path / "t")).open_ranged(whole)  # type: ignore[arg-type]
