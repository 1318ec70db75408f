"""column_hash: a whole column hashes exactly as `stable_hash` hashes each of its values."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.runtime import column_hash
from epochal.state.keygroups import key_group_of, stable_hash

# Arrow strings are UTF-8: no lone surrogates. Lengths cross `_LONG`, so both paths run.
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=70)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), texts), max_size=120), st.sampled_from([pa.string(), pa.large_string()]))
def test_strings_hash_as_stable_hash(values: list[str | None], string_type: pa.DataType) -> None:
    keys = pa.array(values, string_type)
    assert column_hash.stable_hashes(keys).tolist() == [stable_hash(v) for v in values]
    assert column_hash.key_groups(keys, 128).tolist() == [key_group_of(v, 128) for v in values]


INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32()]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_integers_hash_as_stable_hash(data: st.DataObject) -> None:
    int_type = data.draw(st.sampled_from(INT_TYPES))
    bits = int_type.bit_width
    signed = not pa.types.is_unsigned_integer(int_type)
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    values = data.draw(st.lists(st.one_of(st.none(), st.integers(low, high)), max_size=120))
    keys = pa.array(values, int_type)
    assert column_hash.stable_hashes(keys).tolist() == [stable_hash(v) for v in values]


def test_a_sliced_column_hashes_its_own_rows() -> None:
    values = [f"key-{i}" for i in range(300)] + ["x" * 100]
    keys = pa.array(values).slice(7, 200)
    assert column_hash.stable_hashes(keys).tolist() == [stable_hash(v) for v in values[7:207]]


def test_empty_columns_and_empty_strings() -> None:
    assert column_hash.stable_hashes(pa.array([], pa.string())).tolist() == []
    assert column_hash.stable_hashes(pa.array(["", ""], pa.string())).tolist() == [stable_hash("")] * 2


@pytest.mark.parametrize("key_type", [pa.binary(), pa.float64(), pa.uint64(), pa.bool_()])
def test_other_types_are_refused_not_hashed_differently(key_type: pa.DataType) -> None:
    assert not column_hash.supports(key_type)
    with pytest.raises(TypeError, match="no vectorized stable hash"):
        column_hash.stable_hashes(pa.array([], key_type))
