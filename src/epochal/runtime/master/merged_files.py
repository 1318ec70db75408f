"""The merged checkpoint files a manifest lists (`state.merged_files`, Flink's FLIP-306).

A worker writes the snapshots of its tasks into one merged file per checkpoint
(`task.file_merging`), and each task's acknowledgement names the merged files it wrote
(`AcknowledgeCheckpoint.merged`). An incremental chain builds on earlier checkpoints, so a new
checkpoint's state may name segments of a merged file that an earlier, complete checkpoint
wrote and its acknowledgements do not name: its manifest must list that file too, or retention
and restore would not know the whole file (its size, its checksum). The coordinator therefore
remembers the merged files of every complete checkpoint a pending one may build on, and
forgets them once no pending checkpoint is based on it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...state.manifest import FileHandle, Manifest
from ..wire.messages import AcknowledgeCheckpoint


class MergedFiles:
    """The merged files of the complete checkpoints pending ones may build on, by checkpoint and by path."""

    def __init__(self) -> None:
        self._of: dict[int, dict[str, FileHandle]] = {}  # checkpoint id → its manifest's merged files
        self._known: dict[str, FileHandle] = {}  # all of them by path (where segments are looked up)

    def remember(self, manifest: Manifest | None) -> None:
        """The merged files of a complete checkpoint (or the restored one) that new ones may build on."""
        if manifest is not None and manifest.merged:
            files = self._of[manifest.checkpoint_id] = {h.path: h for h in manifest.merged}
            self._known.update(files)

    def forget_before(self, before: int) -> None:
        """No pending checkpoint builds on a checkpoint older than `before`: forget their files."""
        old = [cid for cid in self._of if cid < before]
        if old:
            for cid in old:
                del self._of[cid]
            self._known.clear()
            for files in self._of.values():
                self._known.update(files)

    def listed(self, acks: Iterable[AcknowledgeCheckpoint]) -> tuple[FileHandle, ...]:
        """The merged files a checkpoint's manifest lists, by path: those its acknowledgements
        name, and the earlier ones that hold segments its chains build on."""
        merged: dict[str, FileHandle] = {}
        for ack in acks:
            for entry in ack.states:
                for handle in (*entry.state.keyed_chain(), entry.state.operator):
                    if handle is not None and handle.is_segment and handle.path not in merged \
                            and handle.path in self._known:  # a chain's earlier segment
                        merged[handle.path] = self._known[handle.path]
            for handle in ack.merged:
                merged[handle.path] = handle
        return tuple(merged[path] for path in sorted(merged))
