"""Tests of `epochal.state.handles`: ValueState, ListState and MapState act on the current key.

Every test runs against both backends (`KeyedStateBackend`: heap and disk): the handles are
written against the contract, so the behaviour must be the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.state.contract import KeyedStateBackend
from epochal.state.disk import DiskKeyedStateBackend
from epochal.state.handles import ListState, MapState, ValueState
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import KeyGroupRange

MAX_PAR = 8
KINDS = ["heap", "disk"]


@contextlib.contextmanager
def open_backend(kind: str) -> Iterator[KeyedStateBackend]:
    backend: KeyedStateBackend
    if kind == "disk":
        backend = DiskKeyedStateBackend(KeyGroupRange(0, MAX_PAR), MAX_PAR)
    else:
        backend = HeapKeyedStateBackend(KeyGroupRange(0, MAX_PAR), MAX_PAR)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest) -> Iterator[KeyedStateBackend]:
    with open_backend(request.param) as opened:
        yield opened


def _entries(snapshot: Any, name: str) -> dict[Any, Any]:
    """{key: value} of state `name` in a full snapshot, read as its writer reads it."""
    return {k: v for _, states in snapshot.full_sections() for k, v in states.get(name, {}).items()}


# -- ValueState ----------------------------------------------------------------------------------
def test_value_state_is_per_key(backend: KeyedStateBackend) -> None:
    state = ValueState(backend, "v")
    backend.set_current_key("a")
    assert state.value() is None
    state.update(1)
    backend.set_current_key("b")
    assert state.value() is None
    state.update(2)
    backend.set_current_key("a")
    assert state.value() == 1
    state.clear()
    assert state.value() is None
    backend.set_current_key("b")
    assert state.value() == 2


def test_value_state_default_for_keys_without_a_value(backend: KeyedStateBackend) -> None:
    state = ValueState(backend, "v", default=0)
    backend.set_current_key("a")
    assert state.value() == 0
    state.update(state.value() + 5)
    assert state.value() == 5
    state.clear()
    assert state.value() == 0


def test_value_state_clear_of_a_missing_key_is_a_no_op(backend: KeyedStateBackend) -> None:
    state = ValueState(backend, "v")
    backend.set_current_key("a")
    state.clear()
    assert state.value() is None
    assert list(backend.keys("v")) == []


def test_states_with_different_names_are_independent(backend: KeyedStateBackend) -> None:
    one, two = ValueState(backend, "one"), ValueState(backend, "two")
    backend.set_current_key("a")
    one.update("x")
    assert two.value() is None
    two.update("y")
    assert (one.value(), two.value()) == ("x", "y")


def test_handles_on_the_same_name_share_state(backend: KeyedStateBackend) -> None:
    backend.set_current_key("a")
    ValueState(backend, "v").update(3)
    assert ValueState(backend, "v").value() == 3


def test_a_mutable_default_is_not_shared_between_keys(backend: KeyedStateBackend) -> None:
    state = ValueState(backend, "acc", default=[])
    backend.set_current_key("a")
    acc = state.value()
    acc.append("from a")
    state.update(acc)
    backend.set_current_key("b")
    assert state.value() == []


def test_a_value_stored_from_a_mutable_default_is_copied_on_write(backend: KeyedStateBackend) -> None:
    state = ValueState(backend, "acc", default={})
    backend.set_current_key("a")
    acc = state.value()
    acc["n"] = 1
    state.update(acc)
    snap = backend.snapshot()
    state.value()["n"] = 2
    assert _entries(snap, "acc") == {"a": {"n": 1}}


# -- ListState -----------------------------------------------------------------------------------
def test_list_state_add_add_all_update_clear(backend: KeyedStateBackend) -> None:
    state = ListState(backend, "l")
    backend.set_current_key("a")
    assert state.get() == []
    state.add(1)
    state.add_all([2, 3])
    assert state.get() == [1, 2, 3]
    state.update([9])
    assert state.get() == [9]
    state.add_all([])
    assert state.get() == [9]
    state.clear()
    assert state.get() == []


def test_list_state_get_returns_a_copy(backend: KeyedStateBackend) -> None:
    state = ListState(backend, "l")
    backend.set_current_key("a")
    state.add(1)
    got = state.get()
    got.append(2)
    assert state.get() == [1]


def test_list_state_update_copies_its_argument(backend: KeyedStateBackend) -> None:
    state = ListState(backend, "l")
    backend.set_current_key("a")
    values = [1, 2]
    state.update(values)
    values.append(3)
    assert state.get() == [1, 2]
    state.update((4, 5))  # any sequence; stored as a list
    assert state.get() == [4, 5]


# -- MapState ------------------------------------------------------------------------------------
def test_map_state_operations(backend: KeyedStateBackend) -> None:
    state = MapState(backend, "m")
    backend.set_current_key("a")
    assert state.is_empty() and state.keys() == [] and state.get("x") is None
    assert state.get("x", 7) == 7
    state.put("x", 1)
    state.put("y", 2)
    state.put("x", 3)
    assert state.get("x") == 3 and state.contains("y") and not state.contains("z")
    assert state.keys() == ["x", "y"] and state.values() == [3, 2]
    assert state.items() == [("x", 3), ("y", 2)] and list(state) == ["x", "y"]
    state.remove("x")
    state.remove("absent")
    assert state.items() == [("y", 2)] and not state.is_empty()
    state.remove("y")
    assert state.is_empty()
    state.put("z", 0)
    state.clear()
    assert state.is_empty() and state.get("z") is None


def test_map_state_views_are_copies(backend: KeyedStateBackend) -> None:
    state = MapState(backend, "m")
    backend.set_current_key("a")
    state.put("x", 1)
    keys = state.keys()
    keys.append("bogus")
    for key in state:  # iterating while removing must be safe: __iter__ walks a copy
        state.remove(key)
    assert state.is_empty()


def test_map_state_remove_of_a_missing_key_creates_nothing(backend: KeyedStateBackend) -> None:
    state = MapState(backend, "m")
    backend.set_current_key("a")
    state.remove("x")
    assert list(backend.keys("m")) == []


# -- per-key isolation, as a property ------------------------------------------------------------
keys = st.sampled_from(["a", "b", "c", 1, 2, (1, "x")])
small = st.integers(min_value=0, max_value=9)
handle_ops = st.one_of(
    st.tuples(st.just("v.update"), keys, small),
    st.tuples(st.just("v.clear"), keys),
    st.tuples(st.just("l.add"), keys, small),
    st.tuples(st.just("l.add_all"), keys, st.lists(small, max_size=3)),
    st.tuples(st.just("l.update"), keys, st.lists(small, max_size=3)),
    st.tuples(st.just("l.clear"), keys),
    st.tuples(st.just("m.put"), keys, st.sampled_from("pq"), small),
    st.tuples(st.just("m.remove"), keys, st.sampled_from("pq")),
    st.tuples(st.just("m.clear"), keys),
    st.tuples(st.just("snapshot"), keys),
)


@pytest.mark.parametrize("kind", KINDS)
@given(op_list=st.lists(handle_ops, max_size=50))
@settings(max_examples=100, deadline=None)
def test_handles_behave_like_a_dict_per_key(kind: str, op_list: list[tuple]) -> None:
    with open_backend(kind) as backend:
        _check_handles_behave_like_a_dict_per_key(backend, op_list)


def _check_handles_behave_like_a_dict_per_key(backend: KeyedStateBackend, op_list: list[tuple]) -> None:
    v, lst, m = ValueState(backend, "v"), ListState(backend, "l"), MapState(backend, "m")
    taken: list[tuple[Any, dict[str, dict[Any, Any]]]] = []  # snapshots, and the model then
    model_v: dict[Any, int] = {}
    model_l: dict[Any, list[int]] = {}
    model_m: dict[Any, dict[str, int]] = {}
    for op in op_list:
        kind, key = op[0], op[1]
        backend.set_current_key(key)
        if kind == "v.update":
            v.update(op[2])
            model_v[key] = op[2]
        elif kind == "v.clear":
            v.clear()
            model_v.pop(key, None)
        elif kind == "l.add":
            lst.add(op[2])
            model_l.setdefault(key, []).append(op[2])
        elif kind == "l.add_all":
            lst.add_all(op[2])
            model_l.setdefault(key, []).extend(op[2])
        elif kind == "l.update":
            lst.update(op[2])
            model_l[key] = list(op[2])
        elif kind == "l.clear":
            lst.clear()
            model_l.pop(key, None)
        elif kind == "m.put":
            m.put(op[2], op[3])
            model_m.setdefault(key, {})[op[2]] = op[3]
        elif kind == "m.remove":
            m.remove(op[2])
            model_m.get(key, {}).pop(op[2], None)
        elif kind == "m.clear":
            m.clear()
            model_m.pop(key, None)
        else:
            expected = {"v": dict(model_v), "l": {k: list(x) for k, x in model_l.items() if x}}
            expected["m"] = {k: dict(x) for k, x in model_m.items() if x}
            taken.append((backend.snapshot(), expected))
        for k in ["a", "b", "c", 1, 2, (1, "x")]:
            backend.set_current_key(k)
            assert v.value() == model_v.get(k)
            assert lst.get() == model_l.get(k, [])
            assert dict(m.items()) == model_m.get(k, {})
    for snap, expected in taken:  # later writes never reached a snapshot
        for name in "vlm":
            entries = {k: x for k, x in _entries(snap, name).items() if x != [] and x != {}}
            assert entries == expected[name]


def test_entries_are_every_state_of_one_key_as_private_copies(backend: KeyedStateBackend) -> None:
    backend.set_current_key("a")
    ValueState(backend, "count").update(3)
    ListState(backend, "seen").add_all([1, 2])
    backend.set_current_key(("a",))  # a key whose encoding ends like "a"'s must not be mixed in
    ValueState(backend, "count").update(9)
    backend.set_current_key("b")
    MapState(backend, "other").put("x", 1)
    entries = backend.entries("a")
    assert entries == {"count": 3, "seen": [1, 2]}
    entries["seen"].append(99)  # a copy: the state is not changed through it
    assert backend.current_key == "b"  # the current key is left alone
    assert backend.entries("a")["seen"] == [1, 2]
    assert backend.entries(("a",)) == {"count": 9} and backend.entries("nobody") == {}
