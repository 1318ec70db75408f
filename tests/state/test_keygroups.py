"""Tests of `epochal.state.keygroups`: stable hashing, key groups and key-group ranges."""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.state.keygroups import (
    DEFAULT_MAX_PARALLELISM,
    KeyGroupRange,
    UnhashableKeyError,
    key_group_of,
    key_group_range,
    stable_hash,
    subtask_of_key_group,
)

# Keys the docs promise a stable hash for: str, int, float, bytes, None and tuples of these.
scalar_keys = (
    st.text()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.binary(max_size=20)
    | st.none()
)
stable_keys = st.recursive(scalar_keys, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=6)

# A fixed sample for the cross-process comparison (JSON-friendly once tagged, see _rebuild).
SAMPLE_KEYS = [
    "",
    "user-42",
    "ünïcødé ☃",
    "\ud800",  # a lone surrogate, encoded with surrogatepass
    0,
    1,
    -1,
    2**70,
    1.5,
    -0.0,
    True,
    None,
    b"",
    b"\x00\xff",
    ("a", 1),
    ("a", (None, 2.5, b"x")),
    (),
]


def _tag(key):  # noqa: ANN001, ANN202 - test helper
    """A JSON form of a sample key that `_REBUILD` turns back into the same Python value."""
    if isinstance(key, tuple):
        return ["t", [_tag(k) for k in key]]
    if isinstance(key, bytes):
        return ["b", key.hex()]
    if isinstance(key, bool):
        return ["B", key]
    if isinstance(key, float):
        return ["f", key.hex()]
    if isinstance(key, str):
        return ["s", [ord(c) for c in key]]
    return ["v", key]


_REBUILD = """
import json, sys
from epochal.state.keygroups import stable_hash
def rebuild(t):
    kind, v = t
    if kind == "t": return tuple(rebuild(x) for x in v)
    if kind == "b": return bytes.fromhex(v)
    if kind == "B": return bool(v)
    if kind == "f": return float.fromhex(v)
    if kind == "s": return "".join(map(chr, v))
    return v
keys = [rebuild(t) for t in json.load(sys.stdin)]
print(json.dumps([stable_hash(k) for k in keys] + [hash("salted-by-PYTHONHASHSEED")]))
"""


def _hashes_in_subprocess(seed: str) -> list[int]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run(
        [sys.executable, "-c", _REBUILD],
        input=json.dumps([_tag(k) for k in SAMPLE_KEYS]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def test_stable_hash_is_identical_across_processes_with_different_hash_seeds() -> None:
    first = _hashes_in_subprocess("1")
    second = _hashes_in_subprocess("2")
    # The control value proves the two processes really hash with different salts.
    assert first[-1] != second[-1]
    here = [stable_hash(k) for k in SAMPLE_KEYS]
    assert first[:-1] == here
    assert second[:-1] == here


def test_stable_hash_known_values_do_not_drift() -> None:
    # Pinned values: a change of the hash function silently moves every key to another key
    # group, so existing checkpoints would restore state under the wrong subtask. Change these
    # only together with a checkpoint format version bump.
    keys = ("", "a", "user-42", 1, None, ("a", 1), b"a", 1.5)
    assert [stable_hash(k) for k in keys] == [
        0, 3320656311, 292615309, 1494973835, 1753455111, 1232532506, 2762783174, 3413137482,
    ]


@given(stable_keys, st.integers(min_value=1, max_value=4096))
def test_key_group_of_is_in_range(key, max_parallelism: int) -> None:
    kg = key_group_of(key, max_parallelism)
    assert 0 <= kg < max_parallelism
    assert kg == stable_hash(key) % max_parallelism


@given(stable_keys)
def test_stable_hash_is_a_32_bit_deterministic_function(key) -> None:
    h = stable_hash(key)
    assert 0 <= h < 2**32
    assert stable_hash(key) == h


@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 32768])
def test_equal_numbers_share_a_key_group(max_parallelism: int) -> None:
    groups = {key_group_of(k, max_parallelism) for k in (1, 1.0, True)}
    assert len(groups) == 1
    assert key_group_of(0, max_parallelism) == key_group_of(0.0, max_parallelism) == key_group_of(
        False, max_parallelism
    ) == key_group_of(-0.0, max_parallelism)
    assert key_group_of((1, "x"), max_parallelism) == key_group_of((1.0, "x"), max_parallelism) == key_group_of(
        (True, "x"), max_parallelism
    )


@given(st.integers(min_value=-(2**60), max_value=2**60))
def test_integral_floats_hash_like_their_int(n: int) -> None:
    f = float(n)
    if f == n:  # exactly representable
        assert stable_hash(f) == stable_hash(n)


def _equal_twin(key):  # noqa: ANN001, ANN202 - test helper
    """A key of other types that Python treats as the same dict key (1 ~ 1.0 ~ True)."""
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, int):
        return float(key) if float(key) == key else key
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if isinstance(key, tuple):
        return tuple(_equal_twin(k) for k in key)
    return key


@given(stable_keys)
def test_keys_python_treats_as_equal_hash_alike(key) -> None:  # noqa: ANN001
    twin = _equal_twin(key)
    assert twin == key and hash(twin) == hash(key)  # one dict key, so one key group
    assert stable_hash(twin) == stable_hash(key)


def test_distinct_types_are_not_confused() -> None:
    # Unequal keys whose naive string forms coincide must (for these) not collide.
    assert stable_hash("1") != stable_hash(1)
    assert stable_hash(b"a") != stable_hash("a")
    assert stable_hash(("a", "b")) != stable_hash(("ab",))
    assert stable_hash(None) != stable_hash("None")


# A str mixin on purpose (not StrEnum): str(_Color.RED) is "_Color.RED", not "red", so the key
# group must come from the string data, not from str(key).
class _Color(str, enum.Enum):  # noqa: UP042 - the str-mixin enum is what is tested
    RED = "red"


class _MyStr(str):
    pass


@given(st.text())
def test_str_subclasses_hash_like_the_equal_str(s: str) -> None:
    assert _MyStr(s) == s
    assert stable_hash(_MyStr(s)) == stable_hash(s)


def test_str_enum_member_shares_the_key_group_of_its_value() -> None:
    assert _Color.RED == "red"
    assert key_group_of(_Color.RED) == key_group_of("red")


@pytest.mark.parametrize(
    "key",
    [[1, 2], {"a": 1}, object(), {1, 2}, frozenset({1}), ("ok", [1]), bytearray(b"x"), 1j],
    ids=["list", "dict", "object", "set", "frozenset", "tuple-with-list", "bytearray", "complex"],
)
def test_keys_without_a_stable_hash_raise(key) -> None:
    with pytest.raises(UnhashableKeyError):
        stable_hash(key)
    with pytest.raises(UnhashableKeyError):
        key_group_of(key)


def test_unhashable_key_error_is_a_type_error_naming_the_type() -> None:
    with pytest.raises(TypeError, match="list"):
        key_group_of([1])


# -- key-group ranges ---------------------------------------------------------------------------
@st.composite
def parallelisms(draw):  # noqa: ANN001, ANN201
    m = draw(st.integers(min_value=1, max_value=1024))
    p = draw(st.integers(min_value=1, max_value=m))
    return p, m


@given(parallelisms())
@settings(max_examples=200)
def test_key_group_ranges_partition_all_key_groups(pm) -> None:  # noqa: ANN001
    p, m = pm
    ranges = [key_group_range(i, p, m) for i in range(p)]
    # contiguous, in order, covering [0, m) with no gap and no overlap
    assert ranges[0].start == 0
    assert ranges[-1].end == m
    for a, b in zip(ranges, ranges[1:]):
        assert a.end == b.start
    assert all(len(r) >= 1 for r in ranges)  # p <= m: nobody is left without key groups
    sizes = {len(r) for r in ranges}
    assert max(sizes) - min(sizes) <= 1  # balanced
    covered = [kg for r in ranges for kg in r]
    assert covered == list(range(m))


@given(parallelisms())
@settings(max_examples=200)
def test_subtask_of_key_group_inverts_key_group_range(pm) -> None:  # noqa: ANN001
    p, m = pm
    for i in range(p):
        r = key_group_range(i, p, m)
        for kg in r:
            assert subtask_of_key_group(kg, p, m) == i
            assert kg in r
        assert r.start - 1 not in r and r.end not in r


@given(stable_keys, parallelisms())
def test_every_key_is_owned_by_exactly_one_subtask(key, pm) -> None:  # noqa: ANN001
    p, m = pm
    kg = key_group_of(key, m)
    owners = [i for i in range(p) if kg in key_group_range(i, p, m)]
    assert owners == [subtask_of_key_group(kg, p, m)]


@pytest.mark.parametrize(
    "subtask, parallelism, max_parallelism",
    [(0, 0, 128), (0, 129, 128), (-1, 4, 128), (4, 4, 128), (0, -1, 128)],
)
def test_key_group_range_rejects_bad_arguments(subtask: int, parallelism: int, max_parallelism: int) -> None:
    with pytest.raises(ValueError):
        key_group_range(subtask, parallelism, max_parallelism)


def test_key_group_range_membership_and_intersection() -> None:
    r = KeyGroupRange(4, 8)
    assert list(r) == [4, 5, 6, 7] and len(r) == 4
    assert 4 in r and 7 in r and 8 not in r and 3 not in r
    assert "5" not in r and 5.0 not in r  # only ints are key groups
    assert r.intersects(KeyGroupRange(7, 9)) and r.intersects(KeyGroupRange(0, 5))
    assert not r.intersects(KeyGroupRange(8, 12)) and not r.intersects(KeyGroupRange(0, 4))


def test_default_max_parallelism() -> None:
    assert DEFAULT_MAX_PARALLELISM == 128
    assert key_group_range(0, 1, DEFAULT_MAX_PARALLELISM) == KeyGroupRange(0, 128)
