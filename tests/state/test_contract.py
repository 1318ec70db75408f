"""Tests of `epochal.state.contract`: both backends, and their snapshots, implement it.

mypy checks the same statically (`create_backend` returns either backend as a
`KeyedStateBackend`); these tests keep the runtime shapes from drifting apart, and pin that only
the heap backend offers raw key-group maps.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal.config import StateConfig
from epochal.state.backends import create_backend
from epochal.state.contract import KeyedSnapshot, KeyedStateBackend, RawKeyGroupMaps
from epochal.state.disk import DiskKeyedStateBackend, DiskSnapshot
from epochal.state.heap import HeapKeyedStateBackend, HeapSnapshot
from epochal.state.keygroups import KeyGroupRange

OWNED = KeyGroupRange(2, 6)
MAX_PAR = 8


def _members(protocol: type) -> dict[str, Any]:
    """The protocol's own members (methods, properties and annotated attributes) by name."""
    names = {n for klass in protocol.__mro__ if klass is not object for n in vars(klass) if not n.startswith("_")}
    names |= {n for klass in protocol.__mro__ for n in getattr(klass, "__annotations__", {})}
    return {n: getattr(protocol, n, None) for n in sorted(names)}


@pytest.fixture(params=["memory", "disk"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyedStateBackend]:
    made = create_backend(StateConfig(backend=request.param, local_dir=str(tmp_path)), OWNED, MAX_PAR, "op-0")
    try:
        yield made
    finally:
        made.close()


def test_create_backend_makes_the_backend_the_config_names(tmp_path: Path) -> None:
    heap = create_backend(StateConfig(compact_every=3), OWNED, MAX_PAR, "op-0")
    assert isinstance(heap, HeapKeyedStateBackend) and heap.tracker.compact_every == 3
    disk = create_backend(StateConfig(backend="disk", incremental=False, local_dir=str(tmp_path)), OWNED, MAX_PAR, "x")
    try:
        assert isinstance(disk, DiskKeyedStateBackend) and not disk.tracker.incremental
        assert disk.directory.startswith(str(tmp_path))
    finally:
        disk.close()


def test_both_backends_have_every_member_of_the_contract(backend: KeyedStateBackend) -> None:
    assert (backend.key_groups, backend.max_parallelism) == (OWNED, MAX_PAR)
    for name, member in _members(KeyedStateBackend).items():
        assert hasattr(backend, name), name
        if inspect.isfunction(member):
            ours = inspect.signature(getattr(type(backend), name))
            assert list(ours.parameters) == list(inspect.signature(member).parameters), name


def test_both_snapshots_have_every_member_of_the_contract(backend: KeyedStateBackend) -> None:
    backend.set_current_key("k", 3)
    backend.put("s", 1)
    for snapshot in (backend.snapshot(1), backend.snapshot()):
        assert isinstance(snapshot, (HeapSnapshot, DiskSnapshot))
        for name, member in _members(KeyedSnapshot).items():
            assert hasattr(snapshot, name), name
            if inspect.isfunction(member):
                ours = inspect.signature(getattr(type(snapshot), name))
                assert list(ours.parameters) == list(inspect.signature(member).parameters), name
        assert not snapshot.is_delta and snapshot.base == () and snapshot.encoded is None
        assert [(kg, states["s"]) for kg, states in snapshot.full_sections()] == [(3, {"k": 1})]
        snapshot.release()
    backend.on_snapshot_written(1, ())


def test_only_the_heap_backend_offers_raw_key_group_maps(backend: KeyedStateBackend) -> None:
    assert isinstance(backend, RawKeyGroupMaps) == isinstance(backend, HeapKeyedStateBackend)
