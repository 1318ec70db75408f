"""A worker's side of chained backups (`state.backups`): send copies, keep the peers'.

Each data file the worker's snapshots write is handed over by the storage (`on_write`, on the
snapshot thread) and queued; the event loop sends it to the worker's holders on the links the
records use (a `BACKUP` frame: not flow-controlled, not tied to an attempt, since a copy stays
good across restarts) and keeps its own copy. After each snapshot the worker tells its holders
which files it references (`BackupRetained`), so they drop what no retained checkpoint needs.
"""

from __future__ import annotations

import pickle
import queue
from collections.abc import Mapping

from ..runtime.wire.messages import AcknowledgeCheckpoint
from ..runtime.wire.network import BACKUP, Link
from ..state.backups import BackupFile, BackupRetained, BackupStore, holders
from ..state.manifest import FileHandle
from ..state.storage import CheckpointStorage

_PICKLE = 5


class WorkerBackups:
    """Copies of this worker's checkpoint files on its next `replicas` peers, and theirs here."""

    def __init__(self, index: int, workers: int, replicas: int, retain: int, storage: CheckpointStorage) -> None:
        self.index = index
        self.holders = holders(index, workers, replicas)
        self.store = BackupStore(retain + 1)  # one more: a snapshot being acknowledged task by task
        self._written: queue.SimpleQueue[BackupFile] = queue.SimpleQueue()
        self.sent_bytes = 0
        storage.backups = self.store
        storage.on_write = self._on_write

    def _on_write(self, checkpoint_id: int, handle: FileHandle, chunks: list[bytes]) -> None:
        """On the snapshot thread: queue a copy of the file just written."""
        self._written.put(BackupFile(self.index, checkpoint_id, handle, b"".join(chunks)))

    def ship(self, links: Mapping[int, Link]) -> None:
        """On the loop: keep and send the copies written since the last call."""
        while True:
            try:
                copy = self._written.get_nowait()
            except queue.Empty:
                return
            self.store.put(copy)
            self._send(links, copy)

    def snapshotted(self, ack: AcknowledgeCheckpoint, links: Mapping[int, Link]) -> None:
        """A task's snapshot was written: its holders learn which files it references."""
        paths = frozenset(
            handle.path
            for state in ack.states
            for handle in (*state.state.keyed_chain(), state.state.operator)
            if handle is not None
        )
        if not paths:
            return
        self.ship(links)  # its files before the notice
        notice = BackupRetained(self.index, ack.checkpoint_id, paths)
        self.store.retained(notice)
        self._send(links, notice)

    def receive(self, payload: bytes) -> None:
        """A peer's copy or notice."""
        message = pickle.loads(payload)
        if isinstance(message, BackupFile):
            self.store.put(message)
        elif isinstance(message, BackupRetained):
            self.store.retained(message)

    def _send(self, links: Mapping[int, Link], message: BackupFile | BackupRetained) -> None:
        payload = pickle.dumps(message, protocol=_PICKLE)
        for holder in self.holders:
            link = links.get(holder)
            if link is not None and not link.closed:  # a dead holder: its replacement gets the next ones
                link.send_frame(BACKUP, 0, 0, payload)
                self.sent_bytes += len(payload)
