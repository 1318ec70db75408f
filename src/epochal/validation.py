"""Checks of the arguments a user passes, each failing in one line that names the argument and
shows the value (`TypeError` for the wrong type, `ValueError` for a wrong value): the
configuration types check themselves with these, and so do the API's calls, before anything
runs."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _wrong_type(name: str, expected: str, value: object) -> TypeError:
    return TypeError(f"{name} must be {expected}, got {_shown(value)} ({type(value).__name__})")


def check_int(name: str, value: object, *, minimum: int | None = 1, maximum: int | None = None) -> int:
    """`value`, an int of at least `minimum` (and at most `maximum`); `None`: no bound."""
    if minimum is None:
        expected = "an int" if maximum is None else f"an int <= {maximum}"
    elif maximum is not None:
        expected = f"an int in [{minimum}, {maximum}]"
    else:
        expected = {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong_type(name, expected, value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def _check_real(name: str, value: object, expected: str, zero: bool) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _wrong_type(name, expected, value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def check_number(name: str, value: object, *, zero: bool = False) -> float:
    """`value`, a finite number above zero (or at least zero, with `zero`)."""
    return _check_real(name, value, "a non-negative, finite number" if zero else "a positive, finite number", zero)


def check_seconds(name: str, value: object, *, zero: bool = False, or_none: bool = False) -> float:
    """`value`, a duration in seconds: finite, above zero (or at least zero, with `zero`)."""
    expected = ("a non-negative" if zero else "a positive") + " number of seconds" + (" or None" if or_none else "")
    return _check_real(name, value, expected, zero)


def check_bool(name: str, value: object) -> bool:
    """`value`, a bool (not merely truthy: a string "false" is a mistake, not False)."""
    if not isinstance(value, bool):
        raise _wrong_type(name, "True or False", value)
    return value


def check_name(name: str, value: object) -> str:
    """`value`, a non-empty string (an operator's name or uid, a job's name)."""
    if not isinstance(value, str):
        raise _wrong_type(name, "a non-empty str", value)
    if not value.strip():
        raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    return value


def check_path(name: str, value: object) -> str:
    """`value` as a string: a non-empty path or URI (an `os.PathLike` is converted)."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise _wrong_type(name, "a path (str or os.PathLike)", value)
    if not text:
        raise ValueError(f"{name} must be a non-empty path, got {value!r}")
    return text


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """`value`, one of `choices`."""
    expected = " or ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise _wrong_type(name, expected, value)
    if value not in choices:
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def check_callable(name: str, value: T) -> T:
    """`value`, if it can be called (a user function)."""
    if not callable(value):
        raise _wrong_type(name, "callable", value)
    return value


def check_instance(name: str, value: object, cls: type[T]) -> T:
    """`value`, an instance of `cls`."""
    if not isinstance(value, cls):
        raise _wrong_type(name, f"a {cls.__name__}", value)
    return value


def check_has_methods(name: str, value: T, kind: str, methods: Sequence[str]) -> T:
    """`value`, if it has every one of `methods` (a source, a sink, a user function object)."""
    if not all(callable(getattr(value, m, None)) for m in methods):
        raise _wrong_type(name, f"a {kind} (with {', '.join(methods)})", value)
    return value


def check_gc_threshold(name: str, value: object) -> tuple[int, int, int] | None:
    """`value` as a tuple of three non-negative ints (for `gc.set_threshold`), or None."""
    if value is None:
        return None
    expected = "None or three non-negative ints"
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        raise _wrong_type(name, expected, value)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise _wrong_type(name, expected, value)
    first, second, third = value
    if min(first, second, third) < 0:
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return (first, second, third)
