"""KeyIndex: slots agree with a dict of Python keys, whatever the batches, types and collisions."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.runtime import key_index
from epochal.runtime.key_columns import GrowableArray
from epochal.runtime.key_hashes import binary_hashes
from epochal.runtime.key_index import KeyIndex
from epochal.state.keygroups import key_group_of

MAX_P = 128


def check_against_dict(index: KeyIndex, batches: list[pa.Array]) -> None:
    """Feed distinct-key batches; every key keeps one slot, new ones are flagged as added."""
    reference: dict[object, int] = {}
    used: set[int] = set()
    for batch in batches:
        slots, added = index.lookup(batch)
        for key, slot, is_new in zip(batch.to_pylist(), slots.tolist(), added.tolist()):
            if key in reference:
                assert slot == reference[key] and not is_new, key
            else:
                assert is_new and slot not in used, key
                reference[key] = slot
                used.add(slot)
            assert index.key_groups[slot] == key_group_of(key, MAX_P)
    assert len(index) == len(reference) and sorted(reference.values()) == list(range(len(reference)))
    every = np.array(sorted(reference.values()), dtype=np.int64)
    assert index.keys_at(every).to_pylist() == sorted(reference, key=reference.__getitem__)


def distinct(values: list) -> list:
    return list(dict.fromkeys(values))


text_batches = st.lists(
    st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=40).map(distinct), max_size=12
)


@settings(max_examples=150, deadline=None)
@given(text_batches)
def test_string_keys(batches: list[list]) -> None:
    check_against_dict(KeyIndex(pa.string(), MAX_P), [pa.array(b, pa.string()) for b in batches])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40).map(distinct), max_size=12))
def test_integer_keys(batches: list[list]) -> None:
    check_against_dict(KeyIndex(pa.int64(), MAX_P), [pa.array(b, pa.int64()) for b in batches])


@contextlib.contextmanager
def hashes_replaced(replace: Callable[[np.ndarray, pa.Array], np.ndarray]) -> Iterator[None]:
    """Every KeyIndex hashes keys through `replace(real hashes, keys)` inside the block."""
    real = KeyIndex._hashes
    KeyIndex._hashes = lambda self, keys: replace(real(self, keys), keys)  # type: ignore[method-assign]
    try:
        yield
    finally:
        KeyIndex._hashes = real  # type: ignore[method-assign]


@settings(max_examples=100, deadline=None)
@given(text_batches)
def test_colliding_hashes_still_give_exact_slots(batches: list[list]) -> None:
    # Three bits of hash: nearly every key collides with another, in the table and in one batch.
    with hashes_replaced(lambda h, _: h & np.uint64(7)):
        check_against_dict(KeyIndex(pa.string(), MAX_P), [pa.array(b, pa.string()) for b in batches])


def test_colliding_hashes_in_large_batches_take_the_vectorized_insert() -> None:
    with hashes_replaced(lambda h, _: h & np.uint64(0xF0000000F)):
        words = [f"k{i}" for i in range(600)]
        batches = [pa.array(words[:300]), pa.array(words[150:]), pa.array(words[::-1])]
        check_against_dict(KeyIndex(pa.string(), MAX_P), batches)


def test_many_keys_sharing_16_tags_stay_exact_through_growth() -> None:
    with hashes_replaced(lambda h, _: h & np.uint64(0xF_FFFFFFFF)):
        words = [f"k{i}" for i in range(3000)]
        batches = [pa.array(words[i : i + 20]) for i in range(0, len(words), 20)]
        check_against_dict(KeyIndex(pa.string(), MAX_P), batches + batches[::-1])


def test_a_key_whose_chain_meets_its_tag_only_after_growth_keeps_its_slot() -> None:
    """Built cell by cell: in the 64-cell table "b" (home 60, pushed to 63) never passes "a"
    (cell 2), both with tag 1. Growing to 128 cells re-places cells in order, so "b", home 60,
    finds 60-65 taken and meets "a" at 66 with its own tag: it must stay findable."""
    low = {"f64": 64, "f65": 65, "a": 66, "f60": 60, "f61": 61, "f62": 62, "b": 60, "f63": 63}
    low |= {f"g{i}": 10 + i for i in range(9)}  # the ninth new key pushes the load past a quarter
    tag = {k: 1 if k in ("a", "b") else 2 + i for i, k in enumerate(low)}

    def chosen(_: np.ndarray, keys: pa.Array) -> np.ndarray:
        return np.array([(tag[k] << 32) | low[k] for k in keys.to_pylist()], dtype=np.uint64)

    with hashes_replaced(chosen):
        index = KeyIndex(pa.string(), MAX_P)
        placed = ["f64", "f65", "a", "f60", "f61", "f62", "b", "f63"]
        slots = {k: int(index.lookup(pa.array([k]))[0][0]) for k in placed}
        assert len(index._cells) == 64
        index.lookup(pa.array([f"g{i}" for i in range(9)]))
        assert len(index._cells) == 128
        again, added = index.lookup(pa.array(["b", "a"]))
        assert again.tolist() == [slots["b"], slots["a"]] and not added.any()


def test_many_keys_grow_the_table() -> None:
    index = KeyIndex(pa.string(), MAX_P)
    words = [f"w{i}" for i in range(50_000)]
    batches = [pa.array(words[i : i + 7_000]) for i in range(0, len(words), 7_000)]
    check_against_dict(index, batches + batches[::-1])


def test_large_batches_of_new_keys_get_the_key_groups_of_the_per_record_path() -> None:
    # from `_VECTOR_GROUPS_MIN` new keys on, key groups are hashed as a column: both first batches are
    assert key_index._VECTOR_GROUPS_MIN <= 120
    ints = [None, *range(-100, 100), 2**62]
    check_against_dict(KeyIndex(pa.int64(), MAX_P), [pa.array(ints[:150]), pa.array(ints[::-1])])
    texts = [None, "", "x" * 90, *(f"ключ{i}" for i in range(200))]
    check_against_dict(KeyIndex(pa.string(), MAX_P), [pa.array(texts[:120]), pa.array(texts[::-1])])


def test_other_string_and_integer_widths_are_the_same_keys() -> None:
    index = KeyIndex(pa.string(), MAX_P)
    first, _ = index.lookup(pa.array(["a", "b"]))
    again, added = index.lookup(pa.array(["b", "a", "c"], pa.large_string()))
    assert again.tolist() == [first[1], first[0], 2] and added.tolist() == [False, False, True]
    ints = KeyIndex(pa.int32(), MAX_P)
    s1, _ = ints.lookup(pa.array([5, -1], pa.int32()))
    s2, _ = ints.lookup(pa.array([-1, 5], pa.int16()))
    assert s2.tolist() == [s1[1], s1[0]]


def test_sliced_arrays_hash_their_own_values() -> None:
    index = KeyIndex(pa.string(), MAX_P)
    full = pa.array(["xx", "yy", "zz", "ww"])
    slots, _ = index.lookup(full.slice(1, 2))
    assert index.keys_at(slots).to_pylist() == ["yy", "zz"]
    again, added = index.lookup(pa.array(["zz", "yy"]))
    assert again.tolist() == slots[::-1].tolist() and not added.any()


def test_binary_hash_depends_on_every_byte_and_the_length() -> None:
    values = pa.array(["", "\0", "\0\0", "a", "a\0", "ab", "ba"])
    hashes = binary_hashes(values)
    assert len(set(hashes.tolist())) == len(values)


def test_unsupported_key_type_is_refused() -> None:
    assert not KeyIndex.supports(pa.float64())
    with pytest.raises(TypeError, match="double"):
        KeyIndex(pa.float64(), MAX_P)


def test_growable_array_appends_and_keeps_values() -> None:
    g = GrowableArray(np.int64)
    expected: list[int] = []
    for n in (0, 3, 20, 100, 1):
        chunk = np.arange(n) + len(expected)
        g.extend(chunk)
        expected += chunk.tolist()
    assert g.values.tolist() == expected
