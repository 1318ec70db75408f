"""State TTL: expiring value, list and map state on both backends; expired entries leave on
access, by the incremental cleanup, and out of snapshots (full and delta); and in a job, a key
space that never repeats keeps its state flat."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, KeyedProcessFunction, StateTtlConfig, StreamEnvironment
from epochal.state.contract import KeyedStateBackend
from epochal.state.disk import DiskKeyedStateBackend
from epochal.state.heap import HeapKeyedStateBackend
from epochal.state.keygroups import KeyGroupRange
from epochal.state.reader import read_state
from epochal.state.sections import apply_sections
from epochal.state.ttl import StateKind, TtlListState, TtlMapState, TtlValueState
from epochal.state.ttl_cleanup import TtlStates
from epochal.testing import CollectSink, ListSource

MAX_PAR = 8


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@contextlib.contextmanager
def open_backend(kind: str) -> Iterator[KeyedStateBackend]:
    backend: KeyedStateBackend = (DiskKeyedStateBackend(KeyGroupRange(0, MAX_PAR), MAX_PAR) if kind == "disk"
                                  else HeapKeyedStateBackend(KeyGroupRange(0, MAX_PAR), MAX_PAR))
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(params=["heap", "disk"])
def backend(request: pytest.FixtureRequest) -> Iterator[KeyedStateBackend]:
    with open_backend(request.param) as opened:
        yield opened


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="ttl"):
        StateTtlConfig(0)
    with pytest.raises(ValueError, match="update_on"):
        StateTtlConfig(1, update_on="read")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="visibility"):
        StateTtlConfig(1, visibility="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="incremental_cleanup"):
        StateTtlConfig(1, incremental_cleanup=-1)


def test_a_value_expires_after_its_write(backend: KeyedStateBackend) -> None:
    clock = Clock()
    state = TtlValueState(backend, "v", 0, StateTtlConfig(10), clock)
    backend.set_current_key("a")
    state.update(5)
    clock.t += 9.9
    assert state.value() == 5  # a read does not renew it under update_on="write"
    clock.t += 0.1
    assert state.value() == 0  # the default: expired, and deleted on access
    assert backend.get("v") is None


def test_a_read_renews_under_read_and_write(backend: KeyedStateBackend) -> None:
    clock = Clock()
    state = TtlValueState(backend, "v", None, StateTtlConfig(10, update_on="read_and_write"), clock)
    backend.set_current_key("a")
    state.update("x")
    for _ in range(5):
        clock.t += 8
        assert state.value() == "x"
    clock.t += 10
    assert state.value() is None


def test_expired_values_stay_visible_until_cleaned_if_asked(backend: KeyedStateBackend) -> None:
    clock = Clock()
    config = StateTtlConfig(10, visibility="return_expired_if_not_cleaned_up")
    state = TtlValueState(backend, "v", None, config, clock)
    backend.set_current_key("a")
    state.update(1)
    clock.t += 20
    assert state.value() == 1
    states = TtlStates(backend, clock)
    states.register("v", StateKind.VALUE, config)
    states.cleanup(10)
    backend.set_current_key("a")
    assert state.value() is None


def test_list_elements_and_map_entries_expire_one_by_one(backend: KeyedStateBackend) -> None:
    clock = Clock()
    items = TtlListState(backend, "l", StateTtlConfig(10), clock)
    table = TtlMapState(backend, "m", StateTtlConfig(10), clock)
    backend.set_current_key("a")
    items.add(1)
    table.put("x", 1)
    clock.t += 6
    items.add_all([2, 3])
    table.put("y", 2)
    assert items.get() == [1, 2, 3] and table.items() == [("x", 1), ("y", 2)]
    clock.t += 6
    assert items.get() == [2, 3]
    assert table.get("x") is None and table.get("y") == 2 and table.keys() == ["y"]
    assert not table.contains("x") and table.contains("y")
    clock.t += 6
    assert items.get() == [] and table.is_empty()
    assert backend.get("l") is None and backend.get("m") is None


@pytest.mark.parametrize("kind", ["heap", "disk"])
def test_the_incremental_cleanup_keeps_an_unbounded_key_space_flat(kind: str) -> None:
    """A new key per record, never read again: the cleanup alone deletes the expired ones."""
    clock = Clock()
    config = StateTtlConfig(10, incremental_cleanup=5)
    with open_backend(kind) as backend:
        state = TtlValueState(backend, "seen", None, config, clock)
        states = TtlStates(backend, clock)
        states.register("seen", StateKind.VALUE, config)
        sizes = []
        key = 0
        for _second in range(60):
            for _ in range(100):  # 100 new keys a second, in batches of 20
                backend.set_current_key(key)
                state.update(True)
                key += 1
                if key % 20 == 0:
                    states.cleanup(20)
            clock.t += 1
            sizes.append(sum(1 for _ in backend.keys("seen")))
        # live: the last 10 s, 1,000 keys; expired ones left behind: at most about live / (n - 1)
        assert max(sizes[20:]) <= 1000 * 1.4, sizes
        assert max(sizes[20:]) - min(sizes[20:]) < 600, sizes  # flat, not growing
        assert states.cleaned >= key - 1500


def _read_snapshot(snapshot: Any) -> dict[Any, Any]:
    groups: dict[int, dict[str, dict[Any, Any]]] = {}
    if snapshot.is_delta:
        for group, section in snapshot.delta_sections():
            apply_sections(groups, True, {group: section})
    else:
        for group, section in snapshot.full_sections():
            apply_sections(groups, False, {group: section})
    return {k: v for states in groups.values() for k, v in states.get("v", {}).items()}


def test_snapshots_leave_expired_entries_out(backend: KeyedStateBackend) -> None:
    clock = Clock()
    config = StateTtlConfig(10, incremental_cleanup=0)
    state = TtlValueState(backend, "v", None, config, clock)
    states = TtlStates(backend, clock)
    states.register("v", StateKind.VALUE, config)
    for key in range(10):
        backend.set_current_key(key)
        state.update(key)
        clock.t += 1
    # key k expires at 1010 + k: at 1015, keys 0..5 are gone from a full snapshot
    clock.t = 1015.0
    full = states.filtered(backend.snapshot())
    assert sorted(_read_snapshot(full)) == [6, 7, 8, 9]
    assert not full.is_delta
    full.release()


class _Delta:
    """A delta snapshot as a backend makes one: upserts and deletions per state."""

    is_delta, base, entries, released = True, (), 3, False

    def delta_sections(self) -> Iterator[tuple[int, Any]]:
        yield 0, {"v": ({7: (70, 1028.0), 8: (8, 1008.0)}, [3]), "plain": ({1: "x"}, [])}

    def release(self) -> None:
        self.released = True


def test_a_delta_writes_an_expired_upsert_as_a_deletion() -> None:
    clock = Clock()
    clock.t = 1018.0
    states = TtlStates(HeapKeyedStateBackend(KeyGroupRange(0, MAX_PAR), MAX_PAR), clock)
    states.register("v", StateKind.VALUE, StateTtlConfig(10))
    inner = _Delta()
    delta = states.filtered(inner)
    assert delta.is_delta and delta.entries == 3
    assert list(delta.delta_sections()) == [(0, {"v": ({7: (70, 1028.0)}, [3, 8]), "plain": ({1: "x"}, [])})]
    delta.release()
    assert inner.released


class Sessionless(KeyedProcessFunction):
    """Remembers each key for 50 ms of the task's clock: a key seen again within that is a repeat."""

    def open(self, ctx: Any) -> None:
        self.seen = ctx.value_state("seen", default=False, ttl=StateTtlConfig(0.05))

    def process_element(self, value: Any, ctx: Any) -> Any:
        repeat = self.seen.value()
        self.seen.update(True)
        return [(value, repeat)]


def test_in_a_job_state_expires_by_the_task_clock_and_checkpoints_stay_small(tmp_path: Path) -> None:
    """On a virtual clock (a millisecond per step, a batch of 50 records a step): keys seen again
    two batches later are repeats, keys seen again a hundred batches later expired; the last
    checkpoint holds only the keys of the last 50 ms, not the 25,000 seen."""
    from epochal.cluster.inprocess import InProcessExecutor

    keys = list(range(5000)) + list(range(4900, 5000)) + list(range(100)) + list(range(10000, 30000))
    env = StreamEnvironment(parallelism=1, batch_size=50,
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "c")))
    sink = CollectSink()
    env.from_source(ListSource(keys, batch_size=50)).key_by(lambda k: k).process(Sessionless()).uid(
        "sessions").sink_to(sink)
    InProcessExecutor(seed=1, virtual_time=True).execute(env.job_graph("ttl"))
    out = sink.committed()
    assert len(out) == len(keys)
    assert sorted(k for k, repeat in out if repeat) == list(range(4900, 5000))
    stored = read_state(str(tmp_path / "c"), "sessions")
    assert 0 < len(stored) < 5000, len(stored)  # the old keys left the checkpoint
