"""The chaos runner's network faults, and a checkpoint lost to corruption (issue 38).

Network faults are injected at the socket layer by the fault relay (`tests/fault_relay.py`: this
kernel has no `tc` queueing disciplines, and local Spark workers share one network namespace, so
no veth pair can sit between two of them), which every link between the trial's two workers
passes through (`EPOCHAL_LINK_RELAY`, set per trial kind like the fault points):

- `drop_link`: the link is reset mid-stream; both workers see it end and tell the job master
  (`LinkBroken`), which restarts the attempt in place once a grace shows neither process died;
- `stall_link`: one direction of the link stops for 1.5 times the checkpoint timeout; the
  checkpoint in flight expires, the attempt restarts in place, and runs on once the link moves;
- `partition`: both directions stop for twice the checkpoint timeout, then the partition heals:
  detected by the checkpoint timeout as well, recovered once it healed.

`corrupt_checkpoint` is a storage fault the relay has no part in: once the sink committed an
epoch, both workers are stopped (SIGSTOP, so no newer checkpoint completes), the state files the
newest complete checkpoint wrote are corrupted (a flipped byte), one worker is killed and the
other let go on. The restore of the newest checkpoint finds the corruption, the job master
refuses it, restores the one before and replays the refused epoch at its cut: the sink skips
what it committed. Each trial's output is checked exactly, as every chaos trial's.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from typing import Any

from epochal.cluster import relay_hook
from fault_relay import FaultRelay
from spark_jobs import complete_checkpoints, wait_until

KINDS = ("drop_link", "stall_link", "partition", "corrupt_checkpoint")
RELAYED = ("drop_link", "stall_link", "partition")
_RELAY: FaultRelay | None = None
_since = 0.0  # when the trial began: its links are the ones opened since
_PART = re.compile(r"part-\d{5}-(\d{8})-")


def relay() -> FaultRelay:
    """The runner's one relay (one address: Spark keeps one worker daemon for these kinds)."""
    global _RELAY
    if _RELAY is None:
        _RELAY = FaultRelay()
    return _RELAY


def environment(fault: str) -> dict[str, str]:
    """What the trial's workers need in their environment for `fault` (called as it begins)."""
    global _since
    _since = time.monotonic()
    return {relay_hook.ENV: relay().env} if fault in RELAYED else {}


def inject(fault: str, executor: Any, control: Any, ckpt: str, out: str, timeout: float, rng: random.Random) -> bool:
    """Inject `fault` into the running trial; whether it happened."""
    if fault in RELAYED:
        def links() -> list[Any]:
            return [link for link in relay().live() if link.opened >= _since]

        wait_until(lambda: any(min(link.moved) > 0 for link in links()) or control.status().state.is_final,
                   "a link between the workers carried frames", 60)
        if not links():
            return False
        time.sleep(rng.uniform(0.2, 1.0))  # mid-stream
        link = links()[-1] if links() else None
        if link is None:
            return False
        if link.closed:
            return False
        restarts = control.status().restarts
        if fault == "drop_link":
            relay().drop(link)
        elif fault == "stall_link":
            relay().stall(link, timeout * 1.5, direction=rng.randrange(2))
        else:
            relay().partition(link, timeout * 2)
        wait_until(lambda: control.status().restarts > restarts or control.status().state.is_final,
                   f"the {fault} was detected", 60)
        return control.status().restarts > restarts
    if fault == "corrupt_checkpoint":
        return _corrupt_newest(executor, control, ckpt, out)
    raise ValueError(fault)


def _committed_epochs(out: str) -> set[int]:
    return {int(m.group(1)) for name in os.listdir(out) if (m := _PART.match(name))} if os.path.isdir(out) else set()


def _keyed_of(ckpt: str, checkpoint_id: int) -> list[tuple[str, int, int]]:
    """(path, offset, size) of the keyed state the checkpoint wrote itself: its files, or its
    segments of a merged file."""
    from epochal.state.storage import CheckpointStorage

    manifest = CheckpointStorage(ckpt, create=False).load_manifest(checkpoint_id)
    own = f"chk-{checkpoint_id:08d}/"
    return sorted({
        (os.path.join(ckpt, h.path), h.offset or 0, h.size)
        for op in manifest.operators for sub in op.subtasks for h in sub.keyed_chain()
        if h.path.startswith(own) and h.size > 0
    })


def _corrupt_newest(executor: Any, control: Any, ckpt: str, out: str) -> bool:
    wait_until(lambda: len(complete_checkpoints(ckpt)) >= 2 and bool(_committed_epochs(out)) or
               control.status().state.is_final, "two checkpoints, an epoch committed", 120)
    if control.status().state.is_final:
        return False
    workers = sorted(executor.worker_pids.values())
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)  # no newer checkpoint completes from here
    try:
        newest = max(int(os.path.basename(os.path.dirname(m))[4:]) for m in complete_checkpoints(ckpt))
        damaged = _keyed_of(ckpt, newest)  # files, or segments of merged files (the default)
        for path, offset, size in damaged:
            with open(path, "r+b") as f:
                f.seek(offset + size // 2)
                byte = f.read(1)
                f.seek(offset + size // 2)
                f.write(bytes([byte[0] ^ 0x10]))
        os.kill(workers[-1], signal.SIGKILL)
    finally:
        for pid in workers[:-1]:
            os.kill(pid, signal.SIGCONT)
    return bool(damaged)
