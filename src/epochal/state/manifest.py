"""The manifest of a checkpoint: typed records, and their JSON with a checksum of its own.

A manifest is the commit record of one checkpoint (dissertation §4.1.3, the two-phase epoch
commit: an epoch counts as committed only once every task is prepared, and the manifest is
written last). It lists every file a restore reads, with size and SHA-256, and carries the
SHA-256 of its own body, so a corrupt manifest is never mistaken for another one. With a key in
`EPOCHAL_CHECKPOINT_KEY` it also carries an HMAC of its body, checked before anything it lists
is read: checkpoints are unpickled, and only a writer with the key can make one that loads.

The JSON is the records' fields, nothing hand-written per field: `state.plain`
walk the dataclass fields and their type hints. A field added with a default reads older
manifests unchanged; that is how version 1 (one keyed file per subtask, no chains and no
savepoint flag) still loads.

Since version 5 a file handle may name a *segment* of a merged file (`state.merged_files`: one
file per worker and checkpoint holding all of its subtasks' files, as Flink's file merging,
FLIP-306): `offset` says where it starts, `size` and `sha256` are the segment's own, and the
manifest lists every merged file it references in `merged`, with the whole file's size and
SHA-256. So every byte a restore reads is still checked against a checksum, and checking that
the files exist with their sizes stays one metadata call per file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import CheckpointError, CorruptCheckpointError
from .keygroups import KeyGroupRange, KeyGroups, RoutingTable, key_group_set
from .plain import SPARSE, STORED, from_plain, to_plain
from .replay import EpochReplay

__all__ = [
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "CHECKPOINT_PREFIX",
    "FileHandle",
    "SubtaskState",
    "OperatorState",
    "TaskCheckpointStats",
    "SplitLogState",
    "OperatorCounts",
    "PatchState",
    "Manifest",
    "checkpoint_dir_name",
    "checkpoint_of_path",
    "to_plain",
    "from_plain",
]

FORMAT_VERSION = 6
# 1: one keyed file per subtask, no chains; 2: no split logs; 3: no routing tables (contiguous
# ranges); 4: no merged files (no segments); 5: no record counts
READABLE_VERSIONS = frozenset({1, 2, 3, 4, 5, 6})
CHECKPOINT_PREFIX = "chk-"


def checkpoint_dir_name(checkpoint_id: int) -> str:
    """The directory of checkpoint `checkpoint_id` under a storage root: `chk-<id:08d>`."""
    return f"{CHECKPOINT_PREFIX}{checkpoint_id:08d}"


def checkpoint_of_path(path: str) -> int | None:
    """The id of the first `chk-…` directory in a root-relative path, or None."""
    for part in path.split("/"):
        suffix = part[len(CHECKPOINT_PREFIX) :]
        if part.startswith(CHECKPOINT_PREFIX) and suffix.isdigit():
            return int(suffix)
    return None


@dataclass(frozen=True, slots=True)
class FileHandle:
    """A file of a checkpoint: path relative to the storage root, size, and SHA-256; or, with an
    `offset`, a segment of a merged file: `size` bytes from `offset` of the file at `path`, and
    their SHA-256 (the merged file's own are in `Manifest.merged`)."""

    path: str
    size: int
    sha256: str
    offset: int | None = field(default=None, metadata={SPARSE: True})

    @property
    def is_segment(self) -> bool:
        return self.offset is not None

    @property
    def label(self) -> str:
        """What names the bytes, in messages and as a key: `path`, or `path@offset` for a segment."""
        return self.path if self.offset is None else f"{self.path}@{self.offset}"


@dataclass(frozen=True, slots=True)
class SubtaskState:
    """Where one subtask of one operator left its state."""

    subtask: int
    key_group_start: int
    key_group_end: int
    keyed: FileHandle | None
    operator: FileHandle | None
    keyed_base: tuple[FileHandle, ...] = ()  # earlier files of the chain, full file first
    # the key groups it held when they are not the range above (after a live migration)
    key_groups: tuple[int, ...] | None = None

    def holds(self) -> KeyGroups:
        """The key groups this subtask's keyed files hold (and only these may be read from them)."""
        if self.key_groups is not None:
            return key_group_set(self.key_groups)
        return KeyGroupRange(self.key_group_start, self.key_group_end)

    def keyed_chain(self) -> tuple[FileHandle, ...]:
        """Every file of this subtask's keyed state, in the order a restore applies them."""
        return self.keyed_base + ((self.keyed,) if self.keyed is not None else ())


@dataclass(frozen=True, slots=True)
class OperatorState:
    """The state of every subtask of one operator, named by the operator's stable id."""

    uid: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskState, ...]


@dataclass(frozen=True, slots=True)
class TaskCheckpointStats:
    """What one task's part of a checkpoint cost; `barrier_ms`: from the trigger until the task
    fixed its state (the barrier's way there, alignment included)."""

    task: str
    alignment_ms: float
    sync_ms: float
    async_ms: float
    bytes: int
    barrier_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class SplitLogState:
    """The splits a source's enumerator had handed out when the checkpoint was triggered:
    `length` of them, pickled in `segments` (each the splits found since the checkpoint the
    previous segment completed, in the order they were found)."""

    uid: str
    length: int
    segments: tuple[FileHandle, ...] = ()


@dataclass(frozen=True, slots=True)
class OperatorCounts:
    """What one operator (by uid) had processed in the whole job when the checkpoint was taken:
    a job restored from it counts on from these (`runtime.master.job_counts`)."""

    uid: str
    records_in: int
    records_out: int
    late_records: int = 0
    skipped_records: int = 0


@dataclass(frozen=True, slots=True)
class PatchState:
    """A live logic patch in effect at this checkpoint: operator `uid` runs the function pickled
    in `file` from checkpoint `since` on (`runtime.patches`)."""

    uid: str
    patch_id: int
    since: int
    file: FileHandle


@dataclass(frozen=True, slots=True)
class Manifest:
    """The commit record of one checkpoint; its presence makes the checkpoint complete."""

    checkpoint_id: int
    job_name: str
    created_at: float
    duration_ms: float
    operators: tuple[OperatorState, ...]
    tasks: tuple[TaskCheckpointStats, ...] = field(default=())
    is_final: bool = False
    is_savepoint: bool = False
    split_logs: tuple[SplitLogState, ...] = ()  # of sources whose splits are found as they run
    # who owns which key group from this checkpoint on, once key groups moved (`RoutingTable`)
    routing: RoutingTable | None = None
    # the merged files the segments it lists live in, whole (`state.merged_files`), by path
    merged: tuple[FileHandle, ...] = field(default=(), metadata={SPARSE: True})
    # the job master's CPU time for the checkpoint (trigger, acknowledgements, this manifest)
    coordinator_ms: float = 0.0
    patches: tuple[PatchState, ...] = field(default=(), metadata={SPARSE: True})  # live logic patches in effect
    # per operator, the records of the whole job up to this checkpoint; None: not known (a
    # checkpoint of an older version, or restored from one)
    counts: tuple[OperatorCounts, ...] | None = None
    # where this manifest was read from (a storage root URI): a fact of the reader, not stored
    location: str = field(default="", compare=False, metadata={STORED: False})
    # the epochs after it a restore replays at their cuts (`state.replay`): the job master's, not stored
    replay: EpochReplay | None = field(default=None, compare=False, metadata={STORED: False})

    @property
    def size(self) -> int:
        return sum(t.bytes for t in self.tasks)

    def split_log(self, uid: str) -> SplitLogState | None:
        return next((log for log in self.split_logs if log.uid == uid), None)

    def operator(self, uid: str) -> OperatorState | None:
        for op in self.operators:
            if op.uid == uid:
                return op
        return None

    def files(self) -> Iterable[FileHandle]:
        """Every file (or segment of a merged file) a restore reads, each once (chains share
        files between subtasks)."""
        seen: set[str] = set()
        for op in self.operators:
            for st in op.subtasks:
                for handle in (*st.keyed_chain(), st.operator):
                    if handle is not None and handle.label not in seen:
                        seen.add(handle.label)
                        yield handle
        for split_log in self.split_logs:
            yield from split_log.segments
        for patch in self.patches:
            yield patch.file

    def stored_files(self) -> list[FileHandle]:
        """The files as they lie in storage, each once: the files its handles name, and the
        merged files its segments live in (whole). What retention counts and `check_files`
        checks the sizes of."""
        merged = {h.path: h for h in self.merged}
        out: dict[str, FileHandle] = {}
        for handle in self.files():
            if handle.path in out:
                continue
            if handle.is_segment:
                whole = merged.get(handle.path)
                if whole is None:
                    raise CorruptCheckpointError(
                        f"checkpoint {self.checkpoint_id}: segment {handle.label} of a merged file the manifest "
                        "does not list")
                out[handle.path] = whole
            else:
                out[handle.path] = handle
        return list(out.values())

    def written_size(self) -> int:
        """Bytes of the files that live in this checkpoint's own directory (new in it)."""
        own = checkpoint_dir_name(self.checkpoint_id) + "/"
        return sum(h.size for h in self.files() if h.path.startswith(own))

    def full_size(self) -> int:
        """Bytes of every file a restore of this checkpoint reads."""
        return sum(h.size for h in self.files())

    def to_json(self) -> bytes:
        """The manifest and its checksum, as compact JSON (`python -m json.tool` pretty-prints).

        Written once per checkpoint by the coordinator, so compact and with the C encoder: an
        indented dump takes the pure-Python one.
        """
        body = to_plain(self)
        body["format_version"] = FORMAT_VERSION
        payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
        checksum = hashlib.sha256(payload.encode()).hexdigest()
        key = checkpoint_key()
        signed = "" if key is None else f',"hmac":"{_hmac(key, payload)}"'
        return f'{{"manifest":{payload},"sha256":"{checksum}"{signed}}}'.encode()

    @staticmethod
    def from_json(data: bytes, source: str) -> Manifest:
        """The manifest in `data`; raises CorruptCheckpointError naming `source` if it is not one."""
        try:
            outer = json.loads(data)
            body = outer["manifest"]
            # the checksum is over the canonical dump, so any spacing of the file reads
            payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
            if hashlib.sha256(payload.encode()).hexdigest() != outer["sha256"]:
                raise CorruptCheckpointError(f"{source}: manifest checksum mismatch")
            key = checkpoint_key()
            if key is not None and not hmac.compare_digest(str(outer.get("hmac", "")), _hmac(key, payload)):
                raise CorruptCheckpointError(
                    f"{source}: not authenticated ({KEY_VARIABLE} is set and the manifest carries no valid "
                    "HMAC): refused, nothing of it is unpickled"
                )
            if body.pop("format_version") not in READABLE_VERSIONS:
                raise CorruptCheckpointError(f"{source}: unknown manifest format")
            manifest: Manifest = from_plain(Manifest, body)
            return manifest
        except CorruptCheckpointError:
            raise
        except Exception as exc:
            raise CorruptCheckpointError(f"{source}: unreadable manifest ({exc})") from exc


# -- authentication ------------------------------------------------------------------------------
KEY_VARIABLE = "EPOCHAL_CHECKPOINT_KEY"
_MIN_KEY_BYTES = 16


def checkpoint_key() -> bytes | None:
    """The key that signs and checks manifests, from the environment; None: not authenticated.

    Every data file's SHA-256 is in the manifest and is checked before the file is decoded, so
    an HMAC over the manifest authenticates every file of the checkpoint: nothing a writer
    without the key put in the directory is unpickled.
    """
    value = os.environ.get(KEY_VARIABLE)
    if not value:
        return None
    key = value.encode()
    if len(key) < _MIN_KEY_BYTES:
        raise CheckpointError(f"{KEY_VARIABLE} must be at least {_MIN_KEY_BYTES} bytes (a random secret)")
    return key


def _hmac(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()


