"""A worker's channels to other workers when survivors do not roll back (`RecoveryConfig(survivors=True)`).

The protocol and why it is exactly once: `runtime.master.survivors`. Here, what one worker does:

- `LoggedOutput` keeps everything it sends (its upstream log) from the barrier of the last
  complete checkpoint on. While its consumer's worker is lost (from the moment the link to it
  breaks) it sends nothing but keeps logging and never holds its task back (the log is the
  buffer; its gate is told, even if credit had run out); when the consumer's new process is
  linked it replays what came after the restored checkpoint's barrier (records, watermarks, an
  end of input; not barriers: their checkpoints were aborted), then goes live. The replay and
  what follows it go out as the new process grants credit, from a backlog that does not hold
  the task back either: the survivor runs on while the restored task catches up.
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

# A backlog holds what the log holds too (the same elements), but a restored task slower than its
# survivors would let it grow without end: past twice the replay and this slack, the task is held
# back after all (flow control again), and runs once the backlog is down by half the slack.
_SLACK = 4096


class LoggedOutput(RemoteOutputChannel):
    """An output channel to another worker that keeps what it sent since the last complete barrier."""

    def __init__(self, link: Link, wire_id: int, attempt: int, capacity: int, batch_size: int,
                 flush_interval: float, elastic: bool = False) -> None:
        super().__init__(link, wire_id, attempt, capacity, batch_size, flush_interval, elastic)
        self.capacity = capacity
        self.log: deque[Element] = deque()
        self.detached = False
        # after `rejoin`, what the new consumer has no credit for yet: the replay, then what the
        # task sends while the restored task catches up; the task is not held back meanwhile (the
        # log holds all of it), and it is encoded as credit comes, never all at once
        self.backlog: deque[Element] | None = None
        self.bound = 0  # the backlog's length past which the task is held back after all
        self.held = False

    def has_capacity(self) -> bool:
        if self.detached:
            return True
        if self.backlog is not None:
            return not self.held
        return super().has_capacity()

    def send(self, element: Element) -> None:
        self.log.append(element)
        if self.detached:
            return
        backlog = self.backlog
        if backlog is not None:
            backlog.append(element)
            self._drain()
            if self.backlog is not None and len(backlog) > self.bound and not self.held:
                # the restored task falls ever further behind: bounded (`_SLACK`)
                self.held = True
                self.watch.filled()
            return
        super().send(element)

    def _frame(self, kind: int, payload: bytes) -> None:
        if self.backlog is None:
            super()._frame(kind, payload)
            return
        self.link.send_frame(kind, self.attempt, self.wire_id, payload)
        self.credits -= 1  # the task is not held back: `_drain` waits for credit instead

    def grant(self, credits: int) -> None:
        if self.backlog is None:
            super().grant(credits)
            return
        self.credits += credits
        self._drain()

    def _drain(self) -> None:
        """Send from the backlog as far as credit goes; once it is empty, flow control holds again."""
        backlog = self.backlog
        assert backlog is not None
        while backlog and self.credits > 0:
            super().send(backlog.popleft())
        if not backlog:
            self.backlog = None
            if self.held:  # the gate has it as full already: a grant frees it as before
                self.held = False
                if self.credits > 0:
                    self.watch.freed()
            elif self.credits <= 0 and not self.elastic:
                self.watch.filled()  # out of credit: the task waits for the consumer as before
        elif self.held and len(backlog) <= self.bound - _SLACK // 2:
            self.held = False
            self.watch.freed()

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
        if self.credits <= 0 and not self.elastic:
            self.watch.freed()  # the dead consumer returns no credit: the task must not wait for it

    def rejoin(self, link: Link, checkpoint_id: int) -> int:
        """The consumer's new process restored checkpoint `checkpoint_id`: replay to it what was
        sent after that checkpoint's barrier, then go live; returns the records replayed."""
        self.link, self.credits, self.detached = link, self.capacity, False
        self._buffer, self._rows = [], 0
        backlog: deque[Element] = deque()
        replayed = 0
        for element in _after_barrier(self.log, checkpoint_id):
            if type(element) is Barrier or type(element) is LoopProbe:
                continue  # their checkpoints were aborted; new ones come live
            if is_batch(element):
                replayed += batch_len(element)
            backlog.append(element)
        self.backlog, self.bound, self.held = backlog, 2 * len(backlog) + _SLACK, False  # sent as credit comes
        self._drain()
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
            if self.peer_of[wire_id] == message.worker and isinstance(out, LoggedOutput) and not out.detached:
                out.detach()  # unless its link broke already (`link_broke`)

    def link_broke(self, link: Link) -> None:
        """A link to a peer broke: its process died, or the network dropped it. Either way no
        credit comes back on it, so the channels on it log only from now on, without waiting for
        the job master's `PeerLost` (a task held back by one of them would stop meanwhile); if
        the job master rolls every task back instead, the attempt ends and the logs with it."""
        if self.enabled:
            for out in self.outputs.values():
                if isinstance(out, LoggedOutput) and out.link is link and not out.detached:
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
