"""Job configuration: checkpointing and restarts.

Plain frozen dataclasses at the bottom of the import graph, so that every layer (the API that
takes them, the job graph that carries them, the runtime that obeys them) can read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Young objects collected every 50,000 allocations instead of CPython's 700 (cluster/gc_tuning.py).
DEFAULT_GC_THRESHOLD = (50_000, 20, 20)


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    """When and where to checkpoint, and how much failure to tolerate.

    Args:
        interval: seconds between the starts of two checkpoints; `None` takes no periodic
            checkpoints (a bounded job still takes its final one, so exactly-once sinks commit).
        directory: where checkpoints go: a local path or any pyarrow filesystem URI. `None`
            keeps no checkpoints, so a failure restarts the job from the beginning.
        timeout: seconds after which an unfinished checkpoint is aborted.
        min_pause: seconds between the end of one checkpoint and the start of the next; keeps a
            slow checkpoint from being followed at once by another.
        max_concurrent: checkpoints in flight at once (pipelined epoch commits, L3059).
        tolerable_failures: consecutive failed checkpoints tolerated before the job fails.
        retain: complete checkpoints kept; older ones are deleted once a newer one completes.
        mode: `"aligned"` (the default) takes asynchronous barrier snapshots: the stream keeps
            flowing (ABS). `"synchronous"` is Naiad's scheme, for comparison: the sources halt,
            every channel drains, every task writes its state before it goes on, and the
            sources resume only once the checkpoint is complete.
    """

    interval: float | None = None
    directory: str | None = None
    timeout: float = 600.0
    min_pause: float = 0.0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retain: int = 3
    mode: Literal["aligned", "synchronous"] = "aligned"

    def __post_init__(self) -> None:
        if self.interval is not None and self.interval <= 0:
            raise ValueError("CheckpointConfig.interval must be positive")
        if self.timeout <= 0:
            raise ValueError("CheckpointConfig.timeout must be positive")
        if self.max_concurrent < 1:
            raise ValueError("CheckpointConfig.max_concurrent must be at least 1")
        if self.retain < 1:
            raise ValueError("CheckpointConfig.retain must be at least 1")
        if self.mode not in ("aligned", "synchronous"):
            raise ValueError(f"CheckpointConfig.mode must be 'aligned' or 'synchronous', not {self.mode!r}")

    @property
    def is_periodic(self) -> bool:
        """True when checkpoints are taken every `interval` into `directory`."""
        return self.interval is not None and self.directory is not None


@dataclass(frozen=True, slots=True)
class StateConfig:
    """Where keyed state lives, and how checkpoints write it.

    Args:
        backend: `"memory"` keeps keyed state in Python dicts (fastest; bounded by memory).
            `"disk"` keeps it in an embedded RocksDB per subtask (`rocksdict`), so state can
            outgrow memory; every access pickles, so it is several times slower.
        incremental: write only the entries that changed since the subtask's last complete
            checkpoint (a *delta*); the manifest then references files of earlier checkpoints.
            `False` writes every checkpoint in full.
        compact_every: a chain (a full file plus its deltas) is at most this long: the
            checkpoint that would make it longer is written in full, so a restore reads a
            bounded number of files.
        compact_ratio: a checkpoint is also written in full once the chain's deltas add up to
            more than `compact_ratio` times the size of its full file.
        local_dir: where the disk backend keeps its working databases (default: the system
            temporary directory). They are deleted when the task ends.
        inline_snapshot_entries: a memory-backend snapshot of at most this many entries is
            serialised in the synchronous part of the checkpoint, about 60 ns an entry (1.2 ms
            at the default), and released at once: the records after the barrier then write
            the state in place. A larger one is serialised asynchronously while the records
            after the barrier copy what they write (copy-on-write), so the task never stops
            for long. 0 serialises every snapshot asynchronously.
    """

    backend: Literal["memory", "disk"] = "memory"
    incremental: bool = True
    compact_every: int = 10
    compact_ratio: float = 1.0
    local_dir: str | None = None
    inline_snapshot_entries: int = 20_000

    def __post_init__(self) -> None:
        if self.backend not in ("memory", "disk"):
            raise ValueError(f"StateConfig.backend must be 'memory' or 'disk', not {self.backend!r}")
        if self.compact_every < 1:
            raise ValueError("StateConfig.compact_every must be at least 1")
        if self.compact_ratio <= 0:
            raise ValueError("StateConfig.compact_ratio must be positive")
        if self.inline_snapshot_entries < 0:
            raise ValueError("StateConfig.inline_snapshot_entries must not be negative")


@dataclass(frozen=True, slots=True)
class RestartStrategy:
    """Restart a failed job from its latest complete checkpoint, up to `max_restarts` times.

    Args:
        max_restarts: restarts after the first failure; 0 fails the job on its first error.
        delay: seconds to wait before each restart (fixed delay).
    """

    max_restarts: int = 3
    delay: float = 0.0

    @staticmethod
    def none() -> RestartStrategy:
        """Never restart: the first failure fails the job."""
        return RestartStrategy(max_restarts=0)


@dataclass(frozen=True, slots=True)
class JobConfig:
    """Everything the runtime needs besides the graph."""

    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    channel_capacity: int = 8
    batch_size: int = 1024
    state: StateConfig = field(default_factory=StateConfig)
    # The garbage collector's thresholds while a host runs the job (see cluster/gc_tuning.py);
    # None leaves the process's own settings alone.
    gc_threshold: tuple[int, int, int] | None = DEFAULT_GC_THRESHOLD
