"""Spark types for Python keys and values: what `epochal-state`'s `key` and `value` columns are.

A key that is a `str` in the job is a Spark string, so `WHERE key = 'w1'` works; ints, floats,
bools, bytes, tuples (structs `_1`, `_2`, …), lists (arrays) and dicts (maps) map to
their Spark types. The type is inferred from the values themselves; values of mixed kinds (an
int key here, a str key there) have no common type, and the column is then their JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

__all__ = ["infer_type", "to_spark", "to_json", "Unfit"]

_INT64 = range(-(2**63), 2**63)


class Unfit(ValueError):
    """A value that does not fit the column's type (the checkpoint changed since the schema)."""


def to_json(obj: Any) -> str:
    """The JSON text of a key or value; objects JSON cannot hold appear as their `repr`."""
    try:
        return json.dumps(obj, default=repr, sort_keys=True)
    except (TypeError, ValueError):  # e.g. a dict with tuple keys
        return json.dumps(repr(obj))


def infer_type(values: Iterable[Any]) -> DataType | None:
    """The Spark type that holds every value (None values aside), or None if there is none;
    string where nothing says more (only None values, only empty lists)."""
    kind = _infer(values)
    return None if kind is None else _settled(kind)


def _infer(values: Iterable[Any]) -> DataType | None:
    """As `infer_type`, with NullType for "no value seen": it fits with any type."""
    kinds: DataType | None = NullType()
    for value in values:
        if value is None:
            continue
        kind = _type_of(value)
        kinds = None if kind is None else _common(kinds, kind)
        if kinds is None:
            return None
    return kinds


def _settled(kind: DataType) -> DataType:
    """`kind` with every NullType left (nothing seen) made a string."""
    if isinstance(kind, NullType):
        return StringType()
    if isinstance(kind, StructType):
        return StructType([StructField(f.name, _settled(f.dataType), True) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return ArrayType(_settled(kind.elementType), True)
    if isinstance(kind, MapType):
        return MapType(_settled(kind.keyType), _settled(kind.valueType), True)
    return kind


def _type_of(value: Any) -> DataType | None:
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        return LongType() if value in _INT64 else None
    if isinstance(value, float):
        return DoubleType()
    if isinstance(value, str):
        return StringType()
    if isinstance(value, (bytes, bytearray)):
        return BinaryType()
    if isinstance(value, tuple):
        fields = [_type_of(v) if v is not None else NullType() for v in value]
        if any(f is None for f in fields):
            return None
        return StructType([StructField(f"_{i + 1}", f, True) for i, f in enumerate(fields)])  # type: ignore[arg-type]
    if isinstance(value, list):
        element = _infer(value)
        return None if element is None else ArrayType(element, True)
    if isinstance(value, dict) and None not in value:
        keys, inner = _infer(value.keys()), _infer(value.values())
        return None if keys is None or inner is None else MapType(keys, inner, True)
    return None


def _common(a: DataType | None, b: DataType) -> DataType | None:
    """The type that holds values of both types, or None."""
    if a is None:
        return None
    if a == b or isinstance(b, NullType):
        return a
    if isinstance(a, NullType):
        return b
    if {type(a), type(b)} == {LongType, DoubleType}:
        return DoubleType()
    if isinstance(a, StructType) and isinstance(b, StructType) and len(a.fields) == len(b.fields):
        fields = [_common(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields, strict=True)]
        if any(f is None for f in fields):
            return None
        return StructType([StructField(x.name, f, True) for x, f in zip(a.fields, fields, strict=True)])  # type: ignore[arg-type]
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        inner = _common(a.elementType, b.elementType)
        return None if inner is None else ArrayType(inner, True)
    if isinstance(a, MapType) and isinstance(b, MapType):
        keys, inner = _common(a.keyType, b.keyType), _common(a.valueType, b.valueType)
        return None if keys is None or inner is None else MapType(keys, inner, True)
    return None


def to_spark(value: Any, kind: DataType) -> Any:
    """`value` as Spark's Python side holds a value of `kind` (a string column holds JSON text
    for what is not a str). Raises Unfit if it does not fit."""
    if value is None:
        return None
    if isinstance(kind, StringType):
        return value if isinstance(value, str) else to_json(value)
    if isinstance(kind, BooleanType) and isinstance(value, bool):
        return value
    if isinstance(kind, LongType) and isinstance(value, int) and not isinstance(value, bool) and value in _INT64:
        return value
    if isinstance(kind, DoubleType) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(kind, BinaryType) and isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(kind, StructType) and isinstance(value, tuple) and len(value) == len(kind.fields):
        return tuple(to_spark(v, f.dataType) for v, f in zip(value, kind.fields, strict=True))
    if isinstance(kind, ArrayType) and isinstance(value, list):
        return [to_spark(v, kind.elementType) for v in value]
    if isinstance(kind, MapType) and isinstance(value, dict) and None not in value:
        return {to_spark(k, kind.keyType): to_spark(v, kind.valueType) for k, v in value.items()}
    raise Unfit(f"{value!r} is not a {kind.simpleString()}")
