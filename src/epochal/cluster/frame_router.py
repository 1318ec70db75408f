"""Where the frames a worker's peers send go: the attempt's channels to other workers, by wire id.

Every channel between two workers has a wire id (its index in `runtime.task.wiring.channel_keys`);
a frame carries it and the sender's attempt. A frame of an older attempt (sent before a restart)
is dropped; a frame of a newer one (the peer restarted first) is held until this worker starts
that attempt, then delivered in arrival order; a credit goes to the output channel it names, data
and events to the input channel, a backup copy to the worker's backups (`cluster.backups`).
Channels between two tasks of the same worker are local queues, which no frame reaches.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..plan.job_graph import JobGraph, TaskId
from ..runtime.task.wiring import ChannelEnds, ChannelKey
from ..runtime.wire.channel import LocalChannel
from ..runtime.wire.network import (
    BACKUP,
    CREDIT,
    DATA_ARROW,
    DATA_PICKLE,
    EVENT,
    Link,
    RemoteInputChannel,
    RemoteOutputChannel,
    parse_credit,
)
from .backups import WorkerBackups
from .protocol import worker_of
from .survivors import SurvivorChannels

FLUSH_INTERVAL = 0.005  # seconds an output batch to another worker waits to fill


class FrameRouter:
    """One worker's remote channels of the attempt it runs, and the frames routed to them.

    Args:
        index: the worker's index.
        survivors: makes the channels to other workers (logging and counting ones when
            survivors do not roll back) and learns of delivered frames.
        backups: takes the backup copies peers send; None without chained backups.
    """

    def __init__(self, index: int, survivors: SurvivorChannels, backups: WorkerBackups | None) -> None:
        self.index = index
        self.survivors = survivors
        self.backups = backups
        self.attempt = 0
        self.inputs: dict[int, RemoteInputChannel] = {}
        self.outputs: dict[int, RemoteOutputChannel] = {}
        self.future_frames: list[tuple[int, int, int, bytes]] = []  # of an attempt not started yet

    def begin(self, attempt: int) -> None:
        """The worker starts `attempt`: frames of earlier ones are dropped from now on."""
        self.attempt = attempt

    def wire(self, job: JobGraph, keys: Sequence[ChannelKey], links: dict[int, Link],
             restored_from: int | None) -> dict[ChannelKey, ChannelEnds]:
        """The attempt's channel ends of this worker's tasks: local channels between them, remote
        ones over `links` (peer worker → link) to the other workers' tasks."""
        ends: dict[ChannelKey, ChannelEnds] = {}
        self.inputs, self.outputs = {}, {}
        capacity, attempt_no = job.config.channel_capacity, self.attempt
        self.survivors.start(attempt_no)
        for wire_id, key in enumerate(keys):
            edge = job.edges[key.edge]
            src, dst = worker_of(TaskId(edge.source, key.source)), worker_of(TaskId(edge.target, key.target))
            if src == self.index and dst == self.index:
                ch = LocalChannel(capacity, elastic=edge.is_back_edge)
                ends[key] = ChannelEnds(ch, ch)
            elif src == self.index:
                out = self.survivors.output(
                    dst, links[dst], wire_id, attempt_no, capacity, job.config.batch_size, FLUSH_INTERVAL,
                    edge.is_back_edge,
                )
                self.outputs[wire_id] = out
                ends[key] = ChannelEnds(out, None)
            elif dst == self.index:
                inp = self.survivors.input(src, links[src], wire_id, attempt_no, capacity, restored_from)
                self.inputs[wire_id] = inp
                ends[key] = ChannelEnds(None, inp)
        return ends

    def release(self) -> None:
        """The attempt's tasks are open: deliver the frames that came for it before it started."""
        pending, self.future_frames = self.future_frames, []
        for frame in pending:
            self.on_frame(*frame)

    def on_frame(self, kind: int, attempt: int, wire_id: int, payload: bytes) -> None:
        if kind == BACKUP:
            if self.backups is not None:
                self.backups.receive(payload)
            return
        if attempt < self.attempt:
            return  # from before a restart
        if attempt > self.attempt:
            self.future_frames.append((kind, attempt, wire_id, payload))
            return
        if kind == CREDIT:
            out = self.outputs.get(wire_id)
            if out is not None:
                out.grant(parse_credit(payload))
        elif kind in (DATA_ARROW, DATA_PICKLE, EVENT):
            inp = self.inputs.get(wire_id)
            if inp is not None:
                inp.deliver(kind, payload)
                if self.survivors.catching_up:
                    self.survivors.delivered()

    def flush_due(self, now: float) -> None:
        """Send the output batches whose time is up."""
        for out in self.outputs.values():
            out.flush_if_due(now)

    def buffered(self) -> bool:
        """Whether an output holds a batch not sent yet (the loop then wakes to flush it)."""
        return any(out._buffer for out in self.outputs.values())
