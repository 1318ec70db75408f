"""Key extraction, per record and per Arrow batch, with errors that name operator and record."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import KeySelectorError
from ..plan.aggregates import PartialKey
from ..plan.specs import KeySelector
from ..state.keygroups import UnhashableKeyError, stable_hash

_FIRST = operator.itemgetter(0)


def record_key_fn(key: KeySelector) -> Callable[[Any], Any]:
    """A per-record key function: the selector itself, or an item lookup for a field name (item
    0 for the tuples of partials a local aggregation ships: `PartialKey`)."""
    if isinstance(key, str):
        return operator.itemgetter(key)
    return _FIRST if isinstance(key, PartialKey) else key


def key_column(key: KeySelector) -> str | None:
    """The column an Arrow batch is keyed by under this selector, or None (a function of records)."""
    if isinstance(key, str):
        return key
    return key.column if isinstance(key, PartialKey) else None


# key -> key group, per max parallelism: `stable_hash` costs about 1 µs a key (encode, crc32, mix)
# and the same keys come back batch after batch. Memoising is exact because `stable_hash` gives
# keys that are equal as dict keys (1, 1.0, True; a str and an equal str subclass) the same hash.
# Bounded: a cache that outgrows `_CACHE_LIMIT` entries is dropped and refilled.
_CACHE_LIMIT = 1 << 18
_GROUP_CACHES: dict[int, dict[Any, int]] = {}


def _group_cache(max_parallelism: int) -> dict[Any, int]:
    cache = _GROUP_CACHES.get(max_parallelism)
    if cache is None or len(cache) > _CACHE_LIMIT:
        cache = _GROUP_CACHES[max_parallelism] = {}
    return cache


def key_groups_of_keys(keys: list[Any], max_parallelism: int) -> list[int]:
    """The key group of every key (memoised); raises `UnhashableKeyError` for a bad key."""
    cache = _group_cache(max_parallelism)
    try:
        groups = list(map(cache.get, keys))
    except TypeError:  # an unhashable key: let stable_hash name it
        return [stable_hash(k) % max_parallelism for k in keys]
    if None in groups:
        for i, g in enumerate(groups):
            if g is None:
                k = keys[i]
                g = groups[i] = stable_hash(k) % max_parallelism
                cache[k] = g
    return groups  # type: ignore[return-value]


def key_groups_of_records(
    records: list[Any], key_fn: Callable[[Any], Any], max_parallelism: int, operator_name: str
) -> tuple[list[Any], list[int]]:
    """Keys and key groups of every record; a failing selector names the operator and record."""
    try:
        keys = list(map(key_fn, records))
        return keys, key_groups_of_keys(keys, max_parallelism)
    except Exception:
        pass  # find the record that failed, and say which it was
    keys = []
    groups: list[int] = []
    record = None
    try:
        for record in records:
            k = key_fn(record)
            keys.append(k)
            groups.append(stable_hash(k) % max_parallelism)
    except UnhashableKeyError as exc:
        raise KeySelectorError(operator_name, record, exc) from exc
    except Exception as exc:
        raise KeySelectorError(operator_name, record, exc) from exc
    return keys, groups


def batch_keys(
    batch: Any, key: Any, max_parallelism: int, operator_name: str
) -> tuple[list[Any], list[Any], list[int]]:
    """Records, keys and key groups of a batch: a field name keys an Arrow batch by its column."""
    from .wire.batches import to_records

    records = to_records(batch)
    column = key_column(key)
    if isinstance(batch, pa.RecordBatch) and column is not None:
        distinct, indices, groups = arrow_key_groups(batch, column, max_parallelism, operator_name)
        values = distinct.to_pylist()
        idx = indices.tolist()
        return records, [values[i] for i in idx], groups[indices].tolist()
    keys, key_groups = key_groups_of_records(records, record_key_fn(key), max_parallelism, operator_name)
    return records, keys, key_groups


def encode_key_column(batch: pa.RecordBatch, column: str, operator_name: str) -> tuple[pa.Array, np.ndarray]:
    """`(distinct keys, index of each row's key)` of a key column; None is a key like any other."""
    try:
        keys = batch.column(column)
    except KeyError as exc:
        raise KeySelectorError(
            operator_name, f"<batch with columns {batch.schema.names}>", KeyError(column)
        ) from exc
    if isinstance(keys, pa.DictionaryArray):  # its dictionary may repeat values: encode afresh
        keys = keys.dictionary_decode()
    encoded = pc.dictionary_encode(keys, null_encoding="encode")
    return encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False)


def arrow_key_groups(
    batch: pa.RecordBatch, column: str, max_parallelism: int, operator_name: str
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Dictionary-encode a key column and hash only its distinct values.

    Returns `(distinct keys, index of each row's key, key group of each distinct key)`: per-row
    work stays vectorized, Python touches each distinct key once.
    """
    distinct, indices = encode_key_column(batch, column, operator_name)
    return distinct, indices, key_groups_of_column(distinct, column, max_parallelism, operator_name)


def key_groups_of_column(distinct: pa.Array, column: str, max_parallelism: int, operator_name: str) -> np.ndarray:
    """The key group of every distinct key of a column, one Python step each (memoised)."""
    try:
        return np.array(key_groups_of_keys(distinct.to_pylist(), max_parallelism), dtype=np.int64)
    except UnhashableKeyError as exc:
        raise KeySelectorError(operator_name, f"<column {column!r}>", exc) from exc
