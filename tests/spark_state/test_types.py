"""Spark types for Python keys and values (`epochal.spark.types`): inferred from the values,
JSON where they have no common type, and each value converted to what its type holds."""

from __future__ import annotations

from typing import Any

import pytest

from epochal.spark.types import Unfit, infer_type, to_spark


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["a", "b", None], "string"),
        ([1, 2, 3], "bigint"),
        ([1, 2.5], "double"),
        ([True, False], "boolean"),
        ([b"x"], "binary"),
        ([(1, "a"), (2, None)], "struct<_1:bigint,_2:string>"),
        ([(1, 2), (1.5, 2)], "struct<_1:double,_2:bigint>"),
        ([[1, 2], [], [3.5]], "array<double>"),
        ([{"a": 1}, {"b": 2}], "map<string,bigint>"),
        ([{1: (2, "x")}], "map<bigint,struct<_1:bigint,_2:string>>"),
        ([None], "string"),
        ([], "string"),
    ],
)
def test_the_type_that_holds_every_value(values: list[Any], expected: str) -> None:
    kind = infer_type(values)
    assert kind is not None and kind.simpleString() == expected


@pytest.mark.parametrize(
    "values",
    [["a", 1], [1, True], [(1, "a"), (1, "a", 2)], [2**63], [object()], [{None: 1}], [[1, "a"]], [{"a": 1}, {1: 1}]],
)
def test_values_of_mixed_kinds_have_no_common_type(values: list[Any]) -> None:
    assert infer_type(values) is None


def test_values_convert_to_what_their_column_holds_and_misfits_are_refused() -> None:
    for value in [(1, "a"), {"k": [1.0, 2.0]}, True, "s", 7]:
        kind = infer_type([value])
        assert kind is not None
        assert to_spark(value, kind) == value
    assert to_spark(3, infer_type([1.5])) == 3.0  # type: ignore[arg-type]
    with pytest.raises(Unfit, match="is not a bigint"):
        to_spark("3", infer_type([1]))  # type: ignore[arg-type]
