"""Dataclasses to JSON-ready plain data and back, driven by their type hints: how a manifest is
stored. A field's metadata can keep it out of the JSON (`STORED: False`, a fact of the reader) or
leave it out when it has its default (`SPARSE: True`, so older readers' fields stay as they were).
"""

from __future__ import annotations

import functools
import types
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

STORED = "stored"  # field metadata key: False keeps a field out of the JSON
SPARSE = "sparse"  # field metadata key: True leaves the field out of the JSON when it has its default


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    hint: Any
    required: bool
    sparse: bool = False
    default: Any = None


@functools.cache
def _stored_fields(cls: type) -> tuple[_Field, ...]:
    """The stored fields of a dataclass with their resolved type hints (computed once per type)."""
    hints = get_type_hints(cls)
    return tuple(
        _Field(f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING,
               bool(f.metadata.get(SPARSE, False)), f.default)
        for f in fields(cls)
        if f.metadata.get(STORED, True)
    )


def to_plain(value: Any) -> Any:
    """A record as JSON values: a dataclass becomes a dict of its stored fields, a tuple a list.

    Unlike `dataclasses.asdict`, leaves are not deep-copied (they are immutable). A sparse field
    at its default is left out (a manifest lists thousands of handles at scale).
    """
    if isinstance(value, tuple):
        return [to_plain(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in _stored_fields(type(value)):
            v = getattr(value, f.name)
            if f.sparse and v == f.default:
                continue
            out[f.name] = to_plain(v)
        return out
    return value


def from_plain(hint: Any, value: Any) -> Any:
    """`value` (JSON values) as the type `hint`: dataclasses, `tuple[X, ...]`, `X | None`, and
    str/int/float/bool. Raises ValueError on anything else, an unknown field, or a missing one."""
    origin = get_origin(hint)
    if origin is types.UnionType or origin is Union:
        args = get_args(hint)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) != 1:
            raise ValueError(f"unsupported type {hint!r}")
        return from_plain(others[0], value)
    if origin is tuple:
        item, ellipsis = get_args(hint)
        if ellipsis is not Ellipsis or not isinstance(value, list):
            raise ValueError(f"expected a list for {hint!r}, got {value!r}")
        return tuple(from_plain(item, v) for v in value)
    if isinstance(hint, type) and is_dataclass(hint):
        if not isinstance(value, dict):
            raise ValueError(f"expected an object for {hint.__name__}, got {value!r}")
        known = _stored_fields(hint)
        unknown = value.keys() - {f.name for f in known}
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)} of {hint.__name__}")
        kwargs = {}
        for f in known:
            if f.name in value:
                kwargs[f.name] = from_plain(f.hint, value[f.name])
            elif f.required:
                raise ValueError(f"{hint.__name__} lacks field {f.name!r}")
        return hint(**kwargs)
    return _scalar(hint, value)


def _scalar(hint: Any, value: Any) -> Any:
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, bool) and type(value) is hint:
        return value
    raise ValueError(f"expected {getattr(hint, '__name__', hint)}, got {value!r}")
