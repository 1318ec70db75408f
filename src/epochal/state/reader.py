"""Reading the keyed state of a checkpoint or savepoint, outside any job.

This is what the Spark data source (`epochal.spark`) runs, one key-group range per partition,
and what tests use to look at state directly. Only complete checkpoints are read (their
manifest exists), so what a reader sees is always committed state; an id reads an older one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import NoCheckpointError
from .group_tables import expand
from .keygroups import KeyGroupRange, KeyGroups, key_group_of
from .manifest import Manifest, OperatorState
from .savepoints import load_savepoint, storage_for
from .sections import apply_sections
from .snapshot_files import decode_keyed_file
from .storage import CheckpointStorage


@dataclass(frozen=True, slots=True)
class StateRow:
    """One entry of keyed state: its key group, key, state name and value."""

    key_group: int
    key: Any
    state: str
    value: Any


def open_checkpoint(path: str, checkpoint: str | int | None = None) -> Manifest:
    """The manifest of a checkpoint directory's latest (or given) checkpoint, or of a savepoint
    directory, its files checked present with their sizes; `iter_state` verifies their bytes
    as it reads them."""
    savepoint = load_savepoint(path)
    if savepoint is not None:
        if checkpoint is not None and str(checkpoint) != str(savepoint.checkpoint_id):
            raise NoCheckpointError(
                f"{path!r} is a savepoint of checkpoint {savepoint.checkpoint_id}, not {checkpoint}"
            )
        return savepoint
    storage = CheckpointStorage(path, create=False)
    return storage.resolve("latest" if checkpoint is None else checkpoint)


def operator_state(manifest: Manifest, operator: str) -> OperatorState:
    op = manifest.operator(operator)
    if op is None:
        known = sorted(o.uid for o in manifest.operators)
        raise NoCheckpointError(
            f"checkpoint {manifest.checkpoint_id} has no state of operator uid {operator!r}; it has {known}"
        )
    return op


def iter_state(
    manifest: Manifest, operator: str, key_groups: KeyGroups | None = None
) -> Iterator[StateRow]:
    """Every keyed-state entry of `operator` in `key_groups` (all when None), key group order.

    A columnar operator's table of a key group (`group_tables.GroupTable`) comes out as the
    per-key entries it holds, so readers see keys whichever path kept them."""
    op = operator_state(manifest, operator)
    storage = storage_for(manifest, None)
    wanted: KeyGroups = KeyGroupRange(0, op.max_parallelism) if key_groups is None else key_groups
    for st in op.subtasks:
        held = st.holds()
        these = {g for g in wanted if g in held}
        if not these:
            continue
        groups: dict[int, dict[str, dict[Any, Any]]] = {}
        for handle in st.keyed_chain():
            is_delta, sections = decode_keyed_file(storage.read_file(handle), these, source=handle.label)
            apply_sections(groups, is_delta, sections)
        for key_group in sorted(groups):
            for name in sorted(groups[key_group]):
                for stored, value in groups[key_group][name].items():
                    for key, state, entry in expand(key_group, name, stored, value):
                        yield StateRow(key_group, key, state, entry)


def read_state(path: str, operator: str, checkpoint: str | int | None = None) -> list[StateRow]:
    """The keyed state of operator uid `operator` in the latest (or given) checkpoint at `path`."""
    return list(iter_state(open_checkpoint(path, checkpoint), operator))


def lookup(manifest: Manifest, operator: str, key: Any) -> dict[str, Any]:
    """The values of `key` in `operator`'s keyed state of one checkpoint, by state name (empty
    when the key has none). Reads only the key's key group: a point query, not a scan."""
    group = key_group_of(key, operator_state(manifest, operator).max_parallelism)
    return {row.state: row.value for row in iter_state(manifest, operator, KeyGroupRange(group, group + 1))
            if row.key == key}
