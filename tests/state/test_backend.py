"""Tests of `epochal.state.heap`: the heap keyed-state backend and its copy-on-write snapshots."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.state.handles import ListState, MapState, ValueState
from epochal.state.heap import HeapKeyedStateBackend, HeapSnapshot
from epochal.state.keygroups import KeyGroupRange, key_group_of, key_group_range
from epochal.state.snapshot_files import decode_keyed_state, encode_keyed_state

MAX_PAR = 4  # few key groups, so that several keys share one (the copy unit)
KEYS = ["a", "b", "c", "d", "e", 1, 2, 3]


def full_backend() -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(KeyGroupRange(0, MAX_PAR), MAX_PAR)


def snapshot_contents(snap: HeapSnapshot) -> dict[str, dict[Any, Any]]:
    """name → {key: value}, checking that every entry sits in its key's key group."""
    out: dict[str, dict[Any, Any]] = {}
    for kg, states in snap.groups.items():
        assert kg in snap.key_groups
        for name, entries in states.items():
            for key, value in entries.items():
                assert key_group_of(key, MAX_PAR) == kg
                out.setdefault(name, {})[key] = value
    return out


def live_contents(backend: HeapKeyedStateBackend, names: list[str]) -> dict[str, dict[Any, Any]]:
    out: dict[str, dict[Any, Any]] = {}
    for name in names:
        for kg, key in backend.keys(name):
            backend.set_current_key(key, kg)
            out.setdefault(name, {})[key] = backend.get(name)
    return out


def nonempty(model: dict[str, dict[Any, Any]]) -> dict[str, dict[Any, Any]]:
    return {n: dict(m) for n, m in model.items() if m}


# -- copy-on-write, model-based ------------------------------------------------------------------
keys = st.sampled_from(KEYS)
small = st.integers(min_value=-5, max_value=5)
fresh_value = st.one_of(
    small,
    st.lists(small, max_size=3),
    st.dictionaries(st.sampled_from("xyz"), small, max_size=3),
    st.tuples(small, st.text(max_size=2)),
)
ops = st.one_of(
    st.tuples(st.just("put"), keys, fresh_value),  # backend.put on "raw"
    st.tuples(st.just("delete"), keys),  # backend.delete on "raw"
    st.tuples(st.just("list_add"), keys, small),  # ListState.add → get_mutable(list).append
    st.tuples(st.just("list_update"), keys, st.lists(small, max_size=3)),
    st.tuples(st.just("list_clear"), keys),
    st.tuples(st.just("map_put"), keys, st.sampled_from("xyz"), small),  # get_mutable(dict)[k] = v
    st.tuples(st.just("map_remove"), keys, st.sampled_from("xyz")),
    st.tuples(st.just("value_update"), keys, st.dictionaries(st.sampled_from("xyz"), small, max_size=2)),
    st.tuples(st.just("value_mutate"), keys, st.sampled_from("xyz"), small),  # value()[k] = v, in place
    st.tuples(st.just("value_nested_mutate"), keys, small),  # value()["n"].append(v), in place
    st.tuples(st.just("value_clear"), keys),
    st.tuples(st.just("reduce"), keys, small),  # reduce_into with a fn that extends acc in place
    st.tuples(st.just("count"), keys),  # count_into
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("written")),  # the oldest snapshot's writer is done: nothing reads it any more
)

NAMES = ["raw", "list", "map", "value", "reduce", "count"]


def _extend_in_place(acc: list[int], record: list[int]) -> list[int]:
    acc.extend(record)
    return acc


def apply(op: tuple, backend: HeapKeyedStateBackend, model: dict[str, dict[Any, Any]]) -> None:
    kind = op[0]
    if kind in ("snapshot", "written"):
        return
    key = op[1]
    backend.set_current_key(key)
    lst, mp, val = ListState(backend, "list"), MapState(backend, "map"), ValueState(backend, "value")
    if kind == "put":
        value = copy.deepcopy(op[2])  # the backend gets its own object; the model another
        backend.put("raw", value)
        model["raw"][key] = op[2]
    elif kind == "delete":
        backend.delete("raw")
        model["raw"].pop(key, None)
    elif kind == "list_add":
        lst.add(op[2])
        model["list"].setdefault(key, []).append(op[2])
    elif kind == "list_update":
        lst.update(op[2])
        model["list"][key] = list(op[2])
    elif kind == "list_clear":
        lst.clear()
        model["list"].pop(key, None)
    elif kind == "map_put":
        mp.put(op[2], op[3])
        model["map"].setdefault(key, {})[op[2]] = op[3]
    elif kind == "map_remove":
        mp.remove(op[2])
        if key in model["map"]:
            model["map"][key].pop(op[2], None)
    elif kind == "value_update":
        val.update(copy.deepcopy(op[2]))
        model["value"][key] = copy.deepcopy(op[2])
    elif kind == "value_mutate":
        current = val.value()
        if current is None:
            val.update({op[2]: op[3]})
            model["value"][key] = {op[2]: op[3]}
        else:
            current[op[2]] = op[3]  # in place, no update(): live state changes, snapshots must not
            model["value"][key][op[2]] = op[3]
    elif kind == "value_nested_mutate":
        current = val.value()
        if current is None:
            val.update({"n": [op[2]]})
            model["value"][key] = {"n": [op[2]]}
        else:
            current.setdefault("n", []).append(op[2])  # a mutable value nested in the value
            model["value"][key].setdefault("n", []).append(op[2])
    elif kind == "value_clear":
        val.clear()
        model["value"].pop(key, None)
    elif kind == "reduce":
        out: list[Any] = []
        backend.reduce_into(out, "reduce", [[op[2]]], [key], [key_group_of(key, MAX_PAR)], _extend_in_place)
        model["reduce"][key] = model["reduce"].get(key, []) + [op[2]]
        assert out == [model["reduce"][key]]
    elif kind == "count":
        out = []
        backend.count_into(out, "count", [key], [key_group_of(key, MAX_PAR)])
        model["count"][key] = model["count"].get(key, 0) + 1
        assert out == [(key, model["count"][key])]
    else:  # pragma: no cover
        raise AssertionError(kind)


@given(st.lists(ops, max_size=40))
@settings(max_examples=300, deadline=None)
def test_snapshots_never_see_later_writes(op_list: list[tuple]) -> None:
    backend = full_backend()
    model: dict[str, dict[Any, Any]] = {name: {} for name in NAMES}
    taken: list[tuple[HeapSnapshot, dict[str, dict[Any, Any]]]] = []
    for checkpoint_id, op in enumerate(op_list + [("snapshot",)], 1):
        if op[0] == "snapshot":
            taken.append((backend.snapshot(checkpoint_id), copy.deepcopy(nonempty(model))))
        elif op[0] == "written":
            if taken:
                written = taken.pop(0)[0]
                assert written.checkpoint_id is not None
                backend.on_snapshot_written(written.checkpoint_id, ())
        else:
            apply(op, backend, model)
        # every snapshot taken so far still holds exactly the state at its point
        for snap, expected in taken:
            assert snapshot_contents(snap) == expected
    # and the live state is the model's
    assert nonempty(live_contents(backend, NAMES)) == nonempty(model)


@given(st.lists(ops, max_size=30))
@settings(max_examples=100, deadline=None)
def test_snapshot_counts_its_entries(op_list: list[tuple]) -> None:
    backend = full_backend()
    model: dict[str, dict[Any, Any]] = {name: {} for name in NAMES}
    for op in op_list:
        apply(op, backend, model)
    snap = backend.snapshot()
    assert snap.entries == sum(len(m) for m in model.values())
    assert snap.key_groups == KeyGroupRange(0, MAX_PAR)


def test_snapshot_fixes_state_without_copying() -> None:
    # The synchronous part is cheap: the maps are handed over, not copied ...
    backend = full_backend()
    backend.set_current_key("a")
    backend.put("s", [1])
    first = backend.snapshot()
    second = backend.snapshot()
    kg = key_group_of("a", MAX_PAR)
    assert first.groups[kg]["s"] is second.groups[kg]["s"]
    # ... and the first write after it copies the map, leaving the snapshot's alone.
    backend.get_mutable("s", list).append(2)
    assert first.groups[kg]["s"] == {"a": [1]}
    assert backend.get("s") == [1, 2]


def test_value_changed_in_place_after_value_does_not_reach_the_snapshot() -> None:
    backend = full_backend()
    state = ValueState(backend, "v")
    backend.set_current_key("k")
    state.update({"count": 1, "seen": ["x"]})
    snap = backend.snapshot()
    current = state.value()
    current["count"] = 2
    current["seen"].append("y")
    assert state.value() == {"count": 2, "seen": ["x", "y"]}  # the live state changed
    assert snapshot_contents(snap) == {"v": {"k": {"count": 1, "seen": ["x"]}}}


def test_value_read_twice_after_a_snapshot_is_copied_once() -> None:
    backend = full_backend()
    state = ValueState(backend, "v")
    backend.set_current_key("k")
    state.update({"n": 0})
    backend.snapshot()
    first = state.value()
    assert state.value() is first  # owned now: no copy per access
    first["n"] = 1
    assert state.value() == {"n": 1}


def test_immutable_values_are_shared_with_the_snapshot() -> None:
    backend = full_backend()
    backend.set_current_key("k")
    value = ("a", (1, 2.0), frozenset({3}))
    backend.put("s", value)
    backend.snapshot()
    assert backend.get_for_read("s") is value


# -- routing ------------------------------------------------------------------------------------
def test_keys_outside_the_key_group_range_raise() -> None:
    owned = key_group_range(0, 2, MAX_PAR)  # [0, 2)
    backend = HeapKeyedStateBackend(owned, MAX_PAR)
    inside = next(k for k in KEYS if key_group_of(k, MAX_PAR) in owned)
    outside = next(k for k in KEYS if key_group_of(k, MAX_PAR) not in owned)
    backend.set_current_key(inside)
    backend.put("s", 1)
    with pytest.raises(RuntimeError, match="not owned"):
        backend.set_current_key(outside)
    # a failed switch leaves the current key alone
    assert backend.current_key == inside and backend.get("s") == 1
    with pytest.raises(RuntimeError):
        backend.set_current_key(inside, key_group=3)
    with pytest.raises(RuntimeError):
        backend.set_current_key(inside, key_group=-1)


def test_set_current_key_accepts_a_precomputed_key_group() -> None:
    backend = HeapKeyedStateBackend(KeyGroupRange(2, 4), MAX_PAR)
    backend.set_current_key("whatever", key_group=3)
    assert (backend.current_key, backend.current_key_group) == ("whatever", 3)
    backend.put("s", "v")
    assert list(backend.keys("s")) == [(3, "whatever")]


# -- restore -------------------------------------------------------------------------------------
def _populated(op_list: list[tuple]) -> tuple[HeapKeyedStateBackend, dict[str, dict[Any, Any]]]:
    backend = full_backend()
    model: dict[str, dict[Any, Any]] = {name: {} for name in NAMES}
    for op in op_list:
        apply(op, backend, model)
    return backend, model


@given(st.lists(ops, max_size=30))
@settings(max_examples=100, deadline=None)
def test_restore_round_trips_through_snapshot_files(op_list: list[tuple]) -> None:
    source, model = _populated(op_list)
    data = encode_keyed_state(source.snapshot().groups)
    restored = full_backend()
    restored.restore(decode_keyed_state(data))
    assert nonempty(live_contents(restored, NAMES)) == nonempty(model)
    assert restored.snapshot().groups == source.snapshot().groups


def test_snapshot_restore_snapshot_is_byte_for_byte() -> None:
    # Names first touched "raw" then "list" here; restore meets "list" first, in the key
    # group of "b", which sorts before that of "a".
    kg_a, kg_b = key_group_of("a", MAX_PAR), key_group_of("b", MAX_PAR)
    assert kg_b < kg_a
    source, _ = _populated([("put", "a", 0), ("list_add", "a", 0), ("list_add", "b", 0)])
    data = encode_keyed_state(source.snapshot().groups)
    restored = full_backend()
    restored.restore(decode_keyed_state(data))
    assert encode_keyed_state(restored.snapshot().groups) == data


@given(st.lists(ops, max_size=30), st.integers(min_value=1, max_value=MAX_PAR))
@settings(max_examples=100, deadline=None)
def test_restore_into_any_parallelism_loses_no_key_and_repeats_none(op_list: list[tuple], p: int) -> None:
    source, model = _populated(op_list)
    groups = decode_keyed_state(encode_keyed_state(source.snapshot().groups))
    seen: dict[str, dict[Any, Any]] = {}
    for subtask in range(p):
        part = HeapKeyedStateBackend(key_group_range(subtask, p, MAX_PAR), MAX_PAR)
        part.restore(groups)  # a superset: foreign key groups are skipped
        for name, entries in live_contents(part, NAMES).items():
            for key, value in entries.items():
                assert key not in seen.get(name, {}), "a key restored on two subtasks"
                seen.setdefault(name, {})[key] = value
    assert nonempty(seen) == nonempty(model)


def test_writes_after_restore_do_not_change_the_restored_groups() -> None:
    kg = key_group_of("k", MAX_PAR)
    groups = {kg: {"l": {"k": [1]}, "m": {"k": {"x": 1}}}}
    original = copy.deepcopy(groups)
    backend = full_backend()
    backend.restore(groups)
    backend.set_current_key("k")
    ListState(backend, "l").add(2)
    MapState(backend, "m").put("y", 2)
    assert groups == original
    assert ListState(backend, "l").get() == [1, 2]


def test_restore_skips_foreign_key_groups() -> None:
    backend = HeapKeyedStateBackend(KeyGroupRange(0, 2), MAX_PAR)
    backend.restore({1: {"s": {"x": 1}}, 3: {"s": {"y": 2}}})
    assert list(backend.keys("s")) == [(1, "x")]


def test_reduce_into_names_the_failing_record_by_its_index() -> None:
    backend = full_backend()
    records, keys_ = [1, 2, 0, 4], ["a", "a", "a", "a"]
    out: list[Any] = []
    with pytest.raises(ZeroDivisionError):
        backend.reduce_into(out, "r", records, keys_, [key_group_of("a", MAX_PAR)] * 4, lambda acc, r: acc // r)
    assert records[len(out)] == 0  # the operator reports this record
    assert out == [1, 0]


def test_reduce_into_and_count_into_refuse_a_key_group_they_do_not_own() -> None:
    owned = key_group_range(0, 2, MAX_PAR)
    backend = HeapKeyedStateBackend(owned, MAX_PAR)
    outside = next(k for k in KEYS if key_group_of(k, MAX_PAR) not in owned)
    with pytest.raises(RuntimeError, match="not owned"):
        backend.reduce_into([], "r", [1], [outside], [key_group_of(outside, MAX_PAR)], lambda a, r: a + r)
    with pytest.raises(RuntimeError, match="not owned"):
        backend.count_into([], "c", [outside], [key_group_of(outside, MAX_PAR)])


def test_count_into_names_the_failing_record_by_its_index() -> None:
    backend = full_backend()
    group = key_group_of("b", MAX_PAR)
    backend.restore({group: {"c": {"b": "not a number"}}})
    out: list[Any] = []
    with pytest.raises(TypeError):
        backend.count_into(out, "c", ["a", "a", "b"], [key_group_of("a", MAX_PAR), key_group_of("a", MAX_PAR), group])
    assert out == [("a", 1), ("a", 2)]  # len(out): the record that failed


def test_reduce_into_copies_an_accumulator_a_snapshot_shares_before_fn_changes_it() -> None:
    backend = full_backend()
    group = [key_group_of("k", MAX_PAR)]
    backend.reduce_into([], "r", [[1]], ["k"], group, _extend_in_place)
    snap = backend.snapshot()
    out: list[Any] = []
    backend.reduce_into(out, "r", [[2], [3]], ["k", "k"], group * 2, _extend_in_place)
    assert out[-1] == [1, 2, 3]
    assert snapshot_contents(snap) == {"r": {"k": [1]}}


def _distinct(key: int) -> int:
    """An int equal to `key` but a distinct object, as the key of each incoming record is."""
    return int(str(key))


def test_write_tracking_holds_the_key_objects_of_the_state_itself() -> None:
    """Tracking must keep probing the key objects the state map holds (see `StateMap`).

    Later records bring equal but distinct key objects; if tracking stored those (as sets
    rebuilt after every snapshot did), each write would touch two objects per key, and keyed
    operators measured 5-15 % slower after the first checkpoint. Deleted keys must not linger.
    """
    backend = full_backend()
    keys = range(10_000, 10_040)

    def write(key: int, value: int) -> None:
        backend.set_current_key(key)
        backend.put("v", value)

    for key in keys:
        write(_distinct(key), 1)
    backend.snapshot(1)
    for key in keys:  # the first writes after a snapshot
        write(_distinct(key), 2)
    groups_of_keys = [key_group_of(k, MAX_PAR) for k in keys]
    backend.reduce_into([], "v", [3] * 40, [_distinct(k) for k in keys], groups_of_keys, lambda acc, r: acc + r)
    for key in keys[:10]:
        backend.set_current_key(_distinct(key))
        backend.delete("v")
    restored = range(20_000, 20_010)
    groups: dict[int, dict[str, dict[Any, Any]]] = {}
    for key in restored:
        groups.setdefault(key_group_of(key, MAX_PAR), {"v": {}})["v"][_distinct(key)] = 0
    backend.restore(groups)
    for key in restored:
        write(_distinct(key), 4)

    for maps in backend.maps.states.values():
        for m in maps:
            assert {id(k) for k in m.stamps} == {id(k) for k in m.data}


def test_batch_loops_write_in_place_once_every_snapshot_is_written() -> None:
    """Copy-on-write guards a snapshot until its writer is done; after that it only costs."""
    backend = full_backend()
    group = [key_group_of("k", MAX_PAR)]
    backend.reduce_into([], "r", [[1]], ["k"], group, _extend_in_place)
    live = backend.maps.states["r"][group[0]].data
    first = backend.snapshot(1)
    backend.on_snapshot_written(1, ())
    assert first.released and first.groups == {}  # the frozen maps are dropped at once
    written = backend.snapshot(2)  # its writer is not done: protects its maps ...
    backend.reduce_into([], "r", [[2]], ["k"], group, _extend_in_place)
    assert snapshot_contents(written) == {"r": {"k": [1]}}
    assert backend.maps.states["r"][group[0]].data is not live
    backend.on_snapshot_written(2, ())  # ... until it is
    live = backend.maps.states["r"][group[0]].data
    accumulator = live["k"]
    third = backend.snapshot(3)
    backend.on_snapshot_written(3, ())
    backend.reduce_into([], "r", [[3]], ["k"], group, _extend_in_place)
    assert backend.maps.states["r"][group[0]].data is live  # the map is not copied
    assert live["k"] is accumulator == [1, 2, 3]  # nor the accumulator
    assert backend.maps.states["r"][group[0]].stamps["k"] == backend.epoch  # and it is owned now
    assert third.released


def test_a_snapshot_is_released_only_by_its_own_checkpoint() -> None:
    backend = full_backend()
    backend.set_current_key("k")
    backend.put("v", 1)
    one, two = backend.snapshot(1), backend.snapshot(2)
    backend.on_snapshot_written(2, ())
    assert two.released and not one.released
    assert backend.snapshot_readers()  # checkpoint 1's writer may still read
    backend.on_snapshot_written(7, None)  # a checkpoint it never took: nothing happens
    assert not one.released
    backend.on_snapshot_written(1, None)  # nothing written (failed, or no storage): released too
    assert one.released and not backend.snapshot_readers()


def test_a_snapshot_nobody_holds_reads_nothing() -> None:
    backend = full_backend()
    backend.snapshot()  # dropped at once, never written: nothing can read its maps
    assert not backend.snapshot_readers()
    held = backend.snapshot(1)  # a writer holds it until it is done
    assert backend.snapshot_readers()
    backend.on_snapshot_written(1, ())
    assert held.released and not backend.snapshot_readers()
