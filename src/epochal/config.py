"""Job configuration (checkpointing, state, restarts), and the checks of what users pass in.

Plain frozen dataclasses at the bottom of the import graph, so that every layer (the API that
takes them, the job graph that carries them, the runtime that obeys them) can read them. Each
checks its fields when built, with the `check_*` functions at the end of this module, which the
API, the connectors and `epochal.testing` use for their own arguments too: a value Epochal
cannot run fails where it is given, naming the argument, not later inside a running job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from .validation import (
    check_bool,
    check_choice,
    check_gc_threshold,
    check_instance,
    check_int,
    check_number,
    check_path,
    check_seconds,
)

# Young objects collected every 50,000 allocations instead of CPython's 700 (runtime/gc_tuning.py).
DEFAULT_GC_THRESHOLD = (50_000, 20, 20)
# The most key groups a job may have (Flink's bound too): a routing table, a partitioner's
# owner table and a restore's set of groups are O(key groups), and a group id fits 16 bits.
MAX_KEY_GROUPS = 32_768


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
        max_concurrent: checkpoints in flight at once (pipelined epoch commits,
            dissertation §4.1.3).
        tolerable_failures: consecutive failed checkpoints tolerated before the job fails.
        retain: complete checkpoints kept; older ones are deleted once a newer one completes.
        mode: `"aligned"` (the default) takes asynchronous barrier snapshots: the stream keeps
            flowing (ABS). `"unaligned"`: barriers overtake the data queued ahead of them and
            that data is stored with the state (Flink's unaligned checkpoints): still exactly
            once, and fast under backpressure, at the cost of larger checkpoints; restorable
            only at the same parallelism (savepoints and rescales are aligned).
            `"at_least_once"`: barriers are counted, never aligned: no input ever waits, but
            after a failure some records are processed twice. `"synchronous"` is Naiad's scheme,
            for comparison: the sources halt, every channel drains, every task writes its state
            before it goes on, and the sources resume only once the checkpoint is complete.
        existing: what a job that does not start from a checkpoint does when `directory`
            already holds complete checkpoints (of an earlier run): `"error"` (the default)
            refuses to start, naming the latest one and how to resume it (`from_checkpoint=
            "latest"`); `"overwrite"` deletes every checkpoint there (the `chk-*` directories,
            nothing else) and starts from scratch. Incomplete checkpoints alone (a run that
            failed before its first checkpoint completed, so committed nothing) never stop a
            start: they are deleted.
        filesystem: a `pyarrow.fs.FileSystem` that `directory` is a path in, for a store that
            has no URI pyarrow resolves (an fsspec filesystem wrapped in
            `pyarrow.fs.PyFileSystem(FSSpecHandler(fs))`, a filesystem of your own). It must
            pickle: the workers open the directory through it. None: `directory` says.
        merge_files: each worker (on Spark; the whole process in-process) writes one file per
            checkpoint holding every subtask's state as segments, each with its own checksum
            (Flink's file merging): an object store sees one PUT per worker and checkpoint, not
            one per subtask and operator. `False` writes a file per subtask and operator.
        resume: `"auto"`: a job executed without `from_checkpoint` resumes from the newest
            complete checkpoint in `directory` if there is one, and starts fresh if there is
            none, as Spark Structured Streaming resumes from its checkpoint location: the same
            program is right the first time and after every restart of its driver, with no
            flag. `None` (the default): a start without `from_checkpoint` is a fresh start, and
            `existing` says what happens to an earlier run's checkpoints.
    """

    interval: float | None = None
    directory: str | None = None
    timeout: float = 600.0
    min_pause: float = 0.0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retain: int = 3
    mode: Literal["aligned", "unaligned", "at_least_once", "synchronous"] = "aligned"
    existing: Literal["error", "overwrite"] = "error"
    filesystem: Any = None
    merge_files: bool = True
    resume: Literal["auto"] | None = None

    def __post_init__(self) -> None:
        if self.interval is not None:
            check_seconds("CheckpointConfig.interval", self.interval, or_none=True)
        if self.directory is not None:  # a pathlib.Path is taken as its string
            object.__setattr__(self, "directory", check_path("CheckpointConfig.directory", self.directory))
        check_seconds("CheckpointConfig.timeout", self.timeout)
        check_seconds("CheckpointConfig.min_pause", self.min_pause, zero=True)
        check_int("CheckpointConfig.max_concurrent", self.max_concurrent)
        check_int("CheckpointConfig.tolerable_failures", self.tolerable_failures, minimum=0)
        check_int("CheckpointConfig.retain", self.retain)
        check_bool("CheckpointConfig.merge_files", self.merge_files)
        check_choice("CheckpointConfig.mode", self.mode, ("aligned", "unaligned", "at_least_once", "synchronous"))
        check_choice("CheckpointConfig.existing", self.existing, ("error", "overwrite"))
        if self.resume is not None:
            check_choice("CheckpointConfig.resume", self.resume, ("auto",))
            if self.directory is None:
                raise ValueError('CheckpointConfig.resume="auto" needs a directory to resume from')
        if self.filesystem is not None:
            import pyarrow.fs as pafs

            check_instance("CheckpointConfig.filesystem", self.filesystem, pafs.FileSystem)

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
        backup_replicas: on Spark, every worker also sends each checkpoint file it writes to
            the next `backup_replicas` workers (ChronoStream's chained backup), which hold the
            copies in memory, and keeps its own; a worker whose process dies then has its key
            groups restored by those peers from their copies, and a restore reads local copies
            before storage (`docs/concepts/elasticity.md`). 0: no copies.
        migration_step_bytes: a live move or rescale hands key groups over in steps of about
            this much state each (estimated from the newest checkpoint), one checkpoint per
            step, so that each step holds input back briefly: a quarter of a 1 GB state moves in
            about four steps, of 10 MB in one. 0 moves them all at one checkpoint. A move's own
            `batch` (groups per step) wins.
        max_parallelism: the number of key groups keyed state is cut into: the unit of
            snapshot, rescale and migration, and the most subtasks a keyed operator can run
            with. From 1 to 32,768; None takes the environment's (`StreamEnvironment(
            max_parallelism=...)`, 128 by default). Fixed for the life of a job's state; change
            it through a savepoint (`epochal savepoint rescale-groups`). More groups cost a
            little per group (docs/concepts/scale.md measures it at 128, 1,024 and 32,768).
    """

    backend: Literal["memory", "disk"] = "memory"
    incremental: bool = True
    compact_every: int = 10
    compact_ratio: float = 1.0
    local_dir: str | None = None
    inline_snapshot_entries: int = 20_000
    backup_replicas: int = 0
    migration_step_bytes: int = 64 * 2**20
    max_parallelism: int | None = None

    def __post_init__(self) -> None:
        check_choice("StateConfig.backend", self.backend, ("memory", "disk"))
        if self.max_parallelism is not None:
            check_int("StateConfig.max_parallelism", self.max_parallelism, maximum=MAX_KEY_GROUPS)
        check_int("StateConfig.backup_replicas", self.backup_replicas, minimum=0)
        check_int("StateConfig.migration_step_bytes", self.migration_step_bytes, minimum=0)
        check_bool("StateConfig.incremental", self.incremental)
        check_int("StateConfig.compact_every", self.compact_every)
        check_number("StateConfig.compact_ratio", self.compact_ratio)
        if self.local_dir is not None:
            object.__setattr__(self, "local_dir", check_path("StateConfig.local_dir", self.local_dir))
        check_int("StateConfig.inline_snapshot_entries", self.inline_snapshot_entries, minimum=0)


@dataclass(frozen=True, slots=True)
class RestartStrategy:
    """Restart a failed job from its latest complete checkpoint, up to `max_restarts` times.

    Args:
        max_restarts: restarts after the first failure; 0 fails the job on its first error.
        delay: seconds to wait before each restart (fixed delay).
    """

    max_restarts: int = 3
    delay: float = 0.0

    def __post_init__(self) -> None:
        check_int("RestartStrategy.max_restarts", self.max_restarts, minimum=0)
        check_seconds("RestartStrategy.delay", self.delay, zero=True)

    @staticmethod
    def none() -> RestartStrategy:
        """Never restart: the first failure fails the job."""
        return RestartStrategy(max_restarts=0)


TLS_CERT_ENV = "EPOCHAL_TLS_CERT"
TLS_KEY_ENV = "EPOCHAL_TLS_KEY"
TLS_CA_ENV = "EPOCHAL_TLS_CA"
DEFAULT_MAX_FRAME_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS on every link between the job's processes (workers, job master), with the standard
    `ssl` module: each side presents `certfile` and requires the other's to be signed by `cafile`
    (mutual TLS). The files are read where each link ends: on the driver and on every executor,
    at the same paths (as Spark's own `spark.ssl.*` files are).

    Args:
        certfile: the PEM certificate (chain) this process presents.
        keyfile: its private key; None: it is in `certfile`.
        cafile: the PEM certificate(s) of the authority that signed the peers' certificates;
            None: `certfile` itself (one self-signed certificate shared by every process).
    """

    certfile: str
    keyfile: str | None = None
    cafile: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "certfile", check_path("TlsConfig.certfile", self.certfile))
        if self.keyfile is not None:
            object.__setattr__(self, "keyfile", check_path("TlsConfig.keyfile", self.keyfile))
        if self.cafile is not None:
            object.__setattr__(self, "cafile", check_path("TlsConfig.cafile", self.cafile))

    @staticmethod
    def from_environment() -> TlsConfig | None:
        """`EPOCHAL_TLS_CERT` (and `EPOCHAL_TLS_KEY`, `EPOCHAL_TLS_CA`), or None if it is unset."""
        cert = os.environ.get(TLS_CERT_ENV)
        if not cert:
            return None
        return TlsConfig(cert, os.environ.get(TLS_KEY_ENV) or None, os.environ.get(TLS_CA_ENV) or None)


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """The links between a job's processes on Spark (`runtime.wire.handshake`).

    Every link is authenticated whatever this says: each connection begins with a mutual
    challenge-response over a secret the job master makes for the job, and a peer that fails it
    is closed before any of its bytes is decoded.

    Args:
        tls: encrypt every link too (`TlsConfig`); None: plain TCP (authenticated, not private).
        max_frame_bytes: the largest frame a link accepts from an authenticated peer (a chained
            backup's copy of a checkpoint file is one frame: keep it above the largest state
            file a subtask writes); a larger length closes the link before anything is allocated.
        handshake_timeout: seconds a connection may take to prove itself before it is closed.
    """

    tls: TlsConfig | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    handshake_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.tls is not None:
            check_instance("NetworkConfig.tls", self.tls, TlsConfig)
        check_int("NetworkConfig.max_frame_bytes", self.max_frame_bytes, minimum=1 << 16)
        check_seconds("NetworkConfig.handshake_timeout", self.handshake_timeout)


@dataclass(frozen=True, slots=True)
class RecoveryConfig:
    """What the tasks that survive a lost worker do (on Spark; in-process nothing is lost).

    Args:
        survivors: keep the survivors running instead of rolling every task back: only the
            lost worker's tasks restore the last complete checkpoint and replay; the survivors
            keep their live state, replay to them what they sent since that checkpoint (each
            output channel to another worker keeps it, until the next checkpoint completes),
            and drop what the restored tasks send them again (per-channel record counts since
            the checkpoint's barrier: ChronoStream §III-B/E's sequence numbers and progress
            vectors). Where that is not sound (the lost tasks' output to survivors cannot be
            replayed identically: it does not come straight from a source that reads at most
            one split; loops; unaligned checkpoints; splits found while running; key groups
            or a patch on their way), the job rolls back as without it
            (docs/concepts/elasticity.md says why).
    """

    survivors: bool = False

    def __post_init__(self) -> None:
        check_instance("RecoveryConfig.survivors", self.survivors, bool)


@dataclass(frozen=True, slots=True)
class JobConfig:
    """Everything the runtime needs besides the graph."""

    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    restart: RestartStrategy = field(default_factory=RestartStrategy)
    channel_capacity: int = 8
    batch_size: int = 1024
    state: StateConfig = field(default_factory=StateConfig)
    # The garbage collector's thresholds while a host runs the job (see runtime/gc_tuning.py);
    # None leaves the process's own settings alone.
    gc_threshold: tuple[int, int, int] | None = DEFAULT_GC_THRESHOLD
    # Seconds between two reports of live metrics (a worker's to the job master; the job master
    # publishes twice as often); None gathers none while the job runs (see runtime/metrics.py).
    metrics_interval: float | None = 1.0
    # Workers a Spark stage holds (None: as many as the parallelism); those beyond it stand by,
    # so that a rescale up to this many happens in the running stage (cluster/stage_host.py).
    max_workers: int | None = None
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    # the links between the job's processes on Spark: TLS, frame sizes (cluster/link_guard.py)
    network: NetworkConfig = field(default_factory=NetworkConfig)

    def __post_init__(self) -> None:
        check_instance("JobConfig.checkpoint", self.checkpoint, CheckpointConfig)
        check_instance("JobConfig.recovery", self.recovery, RecoveryConfig)
        check_instance("JobConfig.network", self.network, NetworkConfig)
        check_instance("JobConfig.restart", self.restart, RestartStrategy)
        check_int("JobConfig.channel_capacity", self.channel_capacity)
        check_int("JobConfig.batch_size", self.batch_size)
        check_instance("JobConfig.state", self.state, StateConfig)
        object.__setattr__(self, "gc_threshold", check_gc_threshold("JobConfig.gc_threshold", self.gc_threshold))
        if self.metrics_interval is not None:
            check_seconds("JobConfig.metrics_interval", self.metrics_interval, or_none=True)
        if self.max_workers is not None:
            check_int("JobConfig.max_workers", self.max_workers)


# -- argument checks ---------------------------------------------------------------------------------
# Each returns the value it accepts (normalised where said) and raises TypeError for a value of the
# wrong type, ValueError for one out of range; the message names the argument and shows the value,
# e.g. "parallelism must be a positive int, got 0". A bool is not taken for an int or a number.



