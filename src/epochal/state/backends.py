"""The keyed-state backend a job's `StateConfig` asks for: memory (dicts) or disk (RocksDB)."""

from __future__ import annotations

from ..config import StateConfig
from .contract import KeyedStateBackend
from .heap import HeapKeyedStateBackend
from .keygroups import KeyGroups


def create_backend(
    config: StateConfig, key_groups: KeyGroups, max_parallelism: int, label: str
) -> KeyedStateBackend:
    """A new, empty backend for the key groups of one subtask.

    Args:
        config: which backend, and its incremental-checkpoint options.
        key_groups: the key groups the subtask owns.
        max_parallelism: the job's number of key groups.
        label: names the disk backend's working directory (e.g. operator uid and subtask).
    """
    incremental, compact_every, compact_ratio = config.incremental, config.compact_every, config.compact_ratio
    if config.backend == "disk":
        from .disk import DiskKeyedStateBackend  # imports rocksdict: only when asked for

        return DiskKeyedStateBackend(
            key_groups, max_parallelism, local_dir=config.local_dir, label=label,
            incremental=incremental, compact_every=compact_every, compact_ratio=compact_ratio,
        )
    return HeapKeyedStateBackend(
        key_groups, max_parallelism, incremental=incremental, compact_every=compact_every, compact_ratio=compact_ratio
    )
