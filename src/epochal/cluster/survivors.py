"""A worker's channels to other workers when survivors do not roll back (`RecoveryConfig(survivors=True)`).

The protocol and why it is exactly once: `runtime.master.survivors`. Here, what one worker does:

- `LoggedOutput` keeps everything it sends (its upstream log) from the barrier of the last
  complete checkpoint on. While its consumer's worker is lost it sends nothing but keeps
  logging and never holds its task back (the log is the buffer); when the consumer's new
  process is linked it replays what came after the restored checkpoint's barrier (records,
  watermarks, an end of input; not barriers: their checkpoints were aborted), then goes live.
- `CountingInput` counts the records it delivered since each barrier (the channel's sequence
  numbers; the counts at barrier n form the task's progress vector at n). When its producer's
  worker was lost and restored from checkpoint n, it drops as many records from the front of
  what the new process sends as it had delivered after barrier n (and the barriers and
  watermarks among them), so each record reaches the task once.

Only channels between workers need either: a worker's local channels die, or survive, with
both their ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ..runtime.wire.batches import batch_len
from ..runtime.wire.elements import Barrier, Element, LoopProbe, is_batch
from ..runtime.wire.network import EVENT, Link, RemoteInputChannel, RemoteOutputChannel
from .peers import PeerLinks
from .protocol import CaughtUp, PeerLost, Rejoin


class LoggedOutput(RemoteOutputChannel):
    """An output channel to another worker that keeps what it sent since the last complete barrier."""

    def __init__(self, link: Link, wire_id: int, attempt: int, capacity: int, batch_size: int,
                 flush_interval: float, elastic: bool = False) -> None:
        super().__init__(link, wire_id, attempt, capacity, batch_size, flush_interval, elastic)
        self.capacity = capacity
        self.log: deque[Element] = deque()
        self.detached = False

    def has_capacity(self) -> bool:
        return self.detached or super().has_capacity()

    def send(self, element: Element) -> None:
        self.log.append(element)
        if not self.detached:
            super().send(element)

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is complete: what came before its barrier is never replayed."""
        log = self.log
        for i, element in enumerate(log):
            if type(element) is Barrier and element.checkpoint_id >= checkpoint_id:
                if element.checkpoint_id == checkpoint_id:
                    for _ in range(i + 1):
                        log.popleft()
                return

    def detach(self) -> None:
        """The consumer's worker is lost: log only, until `rejoin` (what is buffered is logged)."""
        self.detached = True
        self._buffer, self._rows = [], 0

    def rejoin(self, link: Link, checkpoint_id: int) -> int:
        """The consumer's new process restored checkpoint `checkpoint_id`: replay to it what was
        sent after that checkpoint's barrier, then go live; returns the records replayed."""
        self.link, self.credits, self.detached = link, self.capacity, False
        self._buffer, self._rows = [], 0
        after = _after_barrier(self.log, checkpoint_id)
        replayed = 0
        for element in after:
            if type(element) is Barrier or type(element) is LoopProbe:
                continue  # their checkpoints were aborted; new ones come live
            if is_batch(element):
                replayed += batch_len(element)
            super().send(element)
        self.flush()
        return replayed


def _after_barrier(log: deque[Element], checkpoint_id: int) -> list[Element]:
    """What `log` holds after the barrier of `checkpoint_id` (all of it if the log starts later)."""
    elements = list(log)
    for i, element in enumerate(elements):
        if type(element) is Barrier and element.checkpoint_id == checkpoint_id:
            return elements[i + 1:]
    return elements


class CountingInput(RemoteInputChannel):
    """An input channel from another worker that counts what it delivered, and drops what a
    restored producer sends again.

    Args:
        restored_from: the checkpoint the channel's tasks started from (its count starts at 0
            there: no barrier of it comes on this channel).
    """

    def __init__(self, link: Link, wire_id: int, attempt: int, capacity: int, restored_from: int | None) -> None:
        super().__init__(link, wire_id, attempt, capacity)
        self.accepted = 0  # records delivered to the task, duplicates dropped
        self.at_barrier: dict[int, int] = {} if restored_from is None else {restored_from: 0}
        self.skip = 0  # records still to drop from a restored producer

    def deliver(self, kind: int, payload: bytes) -> None:
        if self.skip and kind == EVENT:  # a barrier or a watermark inside the replayed prefix: stale
            self._consume()
            return
        super().deliver(kind, payload)
        queue = self._queue
        element = queue[-1]
        if type(element) is Barrier:
            self.at_barrier[element.checkpoint_id] = self.accepted
            return
        if not is_batch(element):
            return
        n = batch_len(element)
        if self.skip:
            dropped = min(self.skip, n)
            self.skip -= dropped
            if dropped == n:
                queue.pop()
                self._consume()  # the frame spent a credit
                return
            queue[-1] = element[dropped:] if type(element) is list else element.slice(dropped)  # type: ignore[union-attr]
            n -= dropped
        self.accepted += n

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is complete: older counts are never needed again."""
        for old in [c for c in self.at_barrier if c < checkpoint_id]:
            del self.at_barrier[old]

    def rejoin(self, link: Link, checkpoint_id: int) -> None:
        """The producer's new process restored checkpoint `checkpoint_id` and sends from its
        barrier again: drop what was delivered since."""
        self.link = link
        self._consumed = 0
        self.skip = self.accepted - self.at_barrier.get(checkpoint_id, 0)


class SurvivorChannels:
    """One worker's part in survivor recovery: its channels to other workers, by peer.

    Args:
        index: the worker's index.
        enabled: `RecoveryConfig.survivors`: without it the worker's channels are plain.
        send_to_driver: the worker's way to the job master (for `CaughtUp`).
    """

    def __init__(self, index: int, enabled: bool, send_to_driver: Callable[[Any], None]) -> None:
        self.index = index
        self.enabled = enabled
        self.send_to_driver = send_to_driver
        self.peer_of: dict[int, int] = {}  # wire id → the other worker
        self.outputs: dict[int, RemoteOutputChannel] = {}
        self.inputs: dict[int, RemoteInputChannel] = {}
        self.rejoining: Rejoin | None = None  # a lost peer's new process, until linked
        self.catching_up = False  # dropping what a restored peer sends again
        self.attempt = 0

    def start(self, attempt: int) -> None:
        """A new attempt builds its channels (`output`, `input`)."""
        self.attempt, self.peer_of, self.outputs, self.inputs = attempt, {}, {}, {}
        self.rejoining, self.catching_up = None, False

    def output(self, peer: int, link: Link, wire_id: int, attempt: int, capacity: int, batch_size: int,
               flush_interval: float, elastic: bool) -> RemoteOutputChannel:
        cls = LoggedOutput if self.enabled else RemoteOutputChannel
        out = cls(link, wire_id, attempt, capacity, batch_size, flush_interval, elastic=elastic)
        self.peer_of[wire_id], self.outputs[wire_id] = peer, out
        return out

    def input(self, peer: int, link: Link, wire_id: int, attempt: int, capacity: int,
              restored_from: int | None) -> RemoteInputChannel:
        inp = (CountingInput(link, wire_id, attempt, capacity, restored_from) if self.enabled
               else RemoteInputChannel(link, wire_id, attempt, capacity))
        self.peer_of[wire_id], self.inputs[wire_id] = peer, inp
        return inp

    def on_control(self, message: Any, peers: PeerLinks) -> None:
        """`PeerLost` and `Rejoin` from the job master."""
        if type(message) is PeerLost:
            self.peer_lost(message)
        elif type(message) is Rejoin:
            self.rejoin(message, peers)

    def peer_lost(self, message: PeerLost) -> None:
        """A peer's process died: log only what goes to it, and run on."""
        for wire_id, out in self.outputs.items():
            if self.peer_of[wire_id] == message.worker and isinstance(out, LoggedOutput):
                out.detach()

    def rejoin(self, message: Rejoin, peers: PeerLinks) -> None:
        """A lost peer's new process restores: link to it (then `linked`)."""
        peers.repair(message.incarnations)
        self.rejoining = message
        self.linked(peers)

    def linked(self, peers: PeerLinks) -> None:
        """Once linked to a lost peer's new process: replay to it, drop what it sends again."""
        rejoin = self.rejoining
        if rejoin is None or rejoin.attempt != self.attempt or not peers.ready(rejoin.incarnations):
            return
        self.rejoining, link = None, peers.links[rejoin.worker]
        for wire_id, channel in [*self.outputs.items(), *self.inputs.items()]:
            if self.peer_of[wire_id] == rejoin.worker and isinstance(channel, (LoggedOutput, CountingInput)):
                channel.rejoin(link, rejoin.checkpoint_id)
        self.catching_up = True
        self.delivered()

    def delivered(self) -> None:
        """A frame was delivered: once no input drops any more, tell the job master."""
        if self.catching_up and not any(isinstance(i, CountingInput) and i.skip for i in self.inputs.values()):
            self.catching_up = False
            self.send_to_driver(CaughtUp(self.index, self.attempt))

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint `checkpoint_id` is complete: logs and counts before its barrier go."""
        for channel in [*self.outputs.values(), *self.inputs.values()]:
            if isinstance(channel, (LoggedOutput, CountingInput)):
                channel.completed(checkpoint_id)
