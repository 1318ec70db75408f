"""Tests of `epochal.state.snapshot_files`: the bytes of keyed and operator state."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.errors import CorruptCheckpointError
from epochal.state.sections import Replacement, ResetSection, SectionCopy, apply_sections
from epochal.state.snapshot_files import (
    FRAME_ENTRIES,
    KeyedFile,
    decode_keyed_file,
    decode_keyed_state,
    decode_operator_state,
    encode_keyed_delta,
    encode_keyed_state,
    encode_operator_state,
)

MAX_PAR = 128

state_keys = st.one_of(st.text(max_size=8), st.integers(), st.tuples(st.text(max_size=3), st.integers()))
state_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=10) | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=4,
)
keyed_groups = st.dictionaries(
    st.integers(min_value=0, max_value=MAX_PAR - 1),
    st.dictionaries(
        st.sampled_from(["count", "sum", "buffer"]),
        st.dictionaries(state_keys, state_values, min_size=1, max_size=3),
        min_size=1,
        max_size=2,
    ),
    max_size=5,
)


@given(keyed_groups)
@settings(max_examples=80)
def test_keyed_state_round_trips(groups) -> None:  # noqa: ANN001
    data = encode_keyed_state(groups)
    assert decode_keyed_state(data) == groups
    assert encode_keyed_state(decode_keyed_state(data)) == data  # byte-for-byte


@given(keyed_groups, st.integers(min_value=0, max_value=MAX_PAR), st.integers(min_value=0, max_value=MAX_PAR))
@settings(max_examples=80)
def test_partial_decode_reads_only_the_wanted_key_groups(groups, a: int, b: int) -> None:  # noqa: ANN001
    lo, hi = min(a, b), max(a, b)
    decoded = decode_keyed_state(encode_keyed_state(groups), range(lo, hi))
    assert decoded == {kg: states for kg, states in groups.items() if lo <= kg < hi}


def test_partial_decode_skips_unwanted_sections_without_unpickling_them() -> None:
    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (_explode, ())

    data = encode_keyed_state({3: {"s": {"k": 1}}, 90: {"s": {"k": Boom()}}})
    assert decode_keyed_state(data, range(0, 64)) == {3: {"s": {"k": 1}}}
    with pytest.raises(CorruptCheckpointError):
        decode_keyed_state(data)  # the unwanted section really was poisoned


def _explode() -> None:
    raise RuntimeError("unpickled a section that was not wanted")


def test_empty_keyed_state_round_trips() -> None:
    data = encode_keyed_state({})
    assert decode_keyed_state(data) == {}
    assert decode_keyed_state(data, range(0, 4)) == {}


@given(keyed_groups, st.data())
@settings(max_examples=60)
def test_a_truncated_file_always_raises(groups, data) -> None:  # noqa: ANN001
    encoded = encode_keyed_state(groups)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1), label="cut")
    with pytest.raises(CorruptCheckpointError):
        decode_keyed_state(encoded[:cut], source="chk-1/x.keyed")


def test_every_truncation_of_one_file_raises() -> None:
    encoded = encode_keyed_state({1: {"s": {"a": [1, 2], "b": "x" * 30}}, 7: {"t": {("k", 1): {"n": 2.5}}}})
    for cut in range(len(encoded)):
        with pytest.raises(CorruptCheckpointError):
            decode_keyed_state(encoded[:cut])


@pytest.mark.parametrize(
    "garbage",
    [b"", b"EPKS1\n", b"not a checkpoint at all", b"EPKS2\n" + b"\0" * 40, b"\x80\x05N." * 10],
)
def test_bytes_of_another_kind_raise(garbage: bytes) -> None:
    with pytest.raises(CorruptCheckpointError):
        decode_keyed_state(garbage)


def test_the_error_names_the_source() -> None:
    with pytest.raises(CorruptCheckpointError, match="chk-00000007/op-1.keyed"):
        decode_keyed_state(b"junk", source="chk-00000007/op-1.keyed")


def test_a_flipped_byte_in_the_framing_raises() -> None:
    encoded = encode_keyed_state({5: {"s": {"k": "value"}}})
    framing = list(range(6)) + list(range(len(encoded) - 6, len(encoded)))  # magic and trailer magic
    for pos in framing:
        corrupted = bytearray(encoded)
        corrupted[pos] ^= 0x01
        with pytest.raises(CorruptCheckpointError):
            decode_keyed_state(bytes(corrupted))


@given(keyed_groups, st.data())
@settings(max_examples=200)
def test_any_flipped_byte_raises_corrupt_checkpoint_error(groups, data) -> None:  # noqa: ANN001
    # Each section has its CRC-32 in the index, the trailer's covers the magic and the index, the
    # magic and CRC fields check themselves, and the index must tile the sections exactly, so a
    # damaged index offset (the one field nothing else covers) is caught too. Whatever the flip,
    # the caller sees this one error.
    encoded = bytearray(encode_keyed_state(groups))
    pos = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1), label="pos")
    encoded[pos] ^= data.draw(st.integers(min_value=1, max_value=255), label="mask")
    with pytest.raises(CorruptCheckpointError, match="chk-00000004/count-1.keyed: unreadable keyed state"):
        decode_keyed_state(bytes(encoded), source="chk-00000004/count-1.keyed")


def test_every_flip_of_the_index_offset_raises() -> None:
    # The trailer's index offset is outside the CRC: before the index had to tile the file,
    # some of these decoded without an error (an offset into the middle of the index).
    groups = {0: {"count": {0: 1, 1: 2}}, 3: {"sum": {"a": 1}}, 4: {"sum": {"b": 2}}}
    encoded = encode_keyed_state(groups)
    trailer = len(encoded) - 18  # <QI6s>: the offset is the trailer's first 8 bytes
    for pos in range(trailer, trailer + 8):
        for mask in range(1, 256):
            corrupted = bytearray(encoded)
            corrupted[pos] ^= mask
            with pytest.raises(CorruptCheckpointError):
                decode_keyed_state(bytes(corrupted))


def test_a_flipped_byte_inside_a_value_is_detected() -> None:
    encoded = bytearray(encode_keyed_state({5: {"s": {"k": "hello world"}}}))
    pos = encoded.index(b"hello world")
    encoded[pos] ^= 0x01  # "hello" → "iello"
    with pytest.raises(CorruptCheckpointError):
        decode_keyed_state(bytes(encoded))


# -- operator state -------------------------------------------------------------------------------
@given(state_values)
@settings(max_examples=100)
def test_operator_state_round_trips(value) -> None:  # noqa: ANN001
    assert decode_operator_state(encode_operator_state(value)) == value


def test_truncated_operator_state_raises() -> None:
    encoded = encode_operator_state({"positions": {"split-0": 17}, "finished": {"split-1"}})
    for cut in range(len(encoded)):
        with pytest.raises(CorruptCheckpointError):
            decode_operator_state(encoded[:cut], source="x.op")


def _v2_file(groups: dict, magic: bytes = b"EPKS2\n") -> bytes:
    """A keyed-state file as written before frames: one pickle per section."""
    import pickle
    import struct
    import zlib

    out, index = [magic], {}
    for group, section in sorted(groups.items()):
        blob = pickle.dumps(section, protocol=5)
        index[group] = (sum(map(len, out)), len(blob))
        out.append(blob)
    offset = sum(map(len, out))
    out.append(pickle.dumps(index, protocol=5))
    crc = zlib.crc32(b"".join(out))
    return b"".join(out) + struct.pack("<QI6s", offset, crc, magic)


def test_files_written_before_frames_still_read() -> None:
    groups = {2: {"s": {"a": 1}}, 9: {"s": {"b": [2]}, "t": {"c": 3}}}
    assert decode_keyed_state(_v2_file(groups)) == groups
    delta = {4: {"s": ({"a": 5}, ["b"])}}
    assert decode_keyed_file(_v2_file(delta, b"EPKD1\n")) == (True, delta)


def test_a_large_section_is_written_in_frames_and_reads_back_whole() -> None:
    big = {"s": {f"k{i}": i for i in range(3 * FRAME_ENTRIES + 5)}, "t": {"x": 1}}
    data = encode_keyed_state({7: big})
    assert decode_keyed_state(data) == {7: big}
    assert data.count(b"\x80\x05") >= 4  # a pickle per frame, not one for the section
    delta = {7: {"s": ({f"k{i}": -i for i in range(2 * FRAME_ENTRIES)}, [f"d{i}" for i in range(FRAME_ENTRIES + 1)])}}
    is_delta, decoded = decode_keyed_file(encode_keyed_delta(delta))
    upserts, deleted = decoded[7]["s"]
    assert is_delta and upserts == delta[7]["s"][0] and sorted(deleted) == sorted(delta[7]["s"][1])


def test_a_reset_section_replaces_its_group_by_its_copies_then_its_delta() -> None:
    full = KeyedFile(encode_keyed_state({3: {"s": {"a": 1, "b": 2}}}))
    first = KeyedFile(encode_keyed_delta({3: {"s": ({"c": 3}, ["a"])}}))
    copies = (SectionCopy(False, full.raw(3)), SectionCopy(True, first.raw(3)))
    data = encode_keyed_delta({3: ResetSection(copies, {"s": ({"d": 4}, ["b"])}), 5: ResetSection()})
    is_delta, decoded = decode_keyed_file(data)
    assert is_delta and decoded == {3: Replacement({"s": {"c": 3, "d": 4}}), 5: Replacement({})}
    again = KeyedFile(data)  # copied once more, by the next owner: markers nest in order
    nested = encode_keyed_delta({3: ResetSection((SectionCopy(True, again.raw(3)),), {"s": ({"e": 5}, ["c"])})})
    assert decode_keyed_file(nested)[1] == {3: Replacement({"s": {"d": 4, "e": 5}})}
    target = {3: {"s": {"stale": 0}}, 5: {"s": {"gone": 1}}}
    apply_sections(target, True, decoded)
    assert target == {3: {"s": {"c": 3, "d": 4}}, 5: {}}


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000, 1 << 20])
def test_a_file_read_in_chunks_reads_as_it_does_whole(chunk: int) -> None:
    groups = {g: {"s": {f"k{i}": i * g for i in range(50 + g)}} for g in range(0, 20, 3)}
    data = encode_keyed_state(groups)
    file = KeyedFile([data[i:i + chunk] for i in range(0, len(data), chunk)], source="x")
    assert {g: file.decode(g) for g in file.groups()} == groups
    assert all(file.raw(g) == KeyedFile(data).raw(g) for g in groups)
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 1
    with pytest.raises(CorruptCheckpointError, match="CRC-32"):
        file = KeyedFile([bytes(damaged[i:i + chunk]) for i in range(0, len(damaged), chunk)])
        for g in file.groups():
            file.decode(g)


def test_files_of_the_format_before_section_checksums_still_read_and_are_checked_whole() -> None:
    groups = {2: {"s": {"a": 1}}, 9: {"s": {"b": [2]}, "t": {"c": 3}}}
    data = _v2_file(groups, b"EPKS3\n")  # small sections: one frame each, as v3 wrote them
    assert decode_keyed_state(data) == groups
    damaged = bytearray(data)
    damaged[8] ^= 1  # inside group 2's section: the file's one CRC catches it before any decoding
    with pytest.raises(CorruptCheckpointError, match="CRC-32"):
        KeyedFile(bytes(damaged))
