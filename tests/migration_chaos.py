"""Live key-group migration under faults on Spark (issue 18's proof): the job, its exact checks,
the mover, and the driver a test kills (`python tests/migration_chaos.py --driver ...`).

The job reads sequence-numbered input: record `(key, seq, 1)` is the `seq`-th update of `key`,
and every key's records lie in one source split, in order, so a running count per key
(`reduce`) emits `(key, seq, seq + 1)` for every record, whatever the timing. The committed
output of a failure-free run is exactly that set, once each: a record lost leaves a `seq` out,
a record counted twice shifts every count after it, a commit repeated repeats a row.

Shipped to Spark's workers by value (`cloudpickle.register_pickle_by_value`).
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from epochal import (  # noqa: E402
    CheckpointConfig,
    EpochalError,
    JobHandle,
    RestartStrategy,
    StateConfig,
    StreamEnvironment,
)
from epochal.connectors import FileSink, read_committed  # noqa: E402
from epochal.state.keygroups import RoutingTable, key_group_of  # noqa: E402
from epochal.state.storage import CheckpointStorage  # noqa: E402
from epochal.testing import ListSource  # noqa: E402

KEYS = 12  # key groups 11, 17, 22, 23, 57 on subtask 0 and 85, 90, 98, 105, 109 on subtask 1
UID = "counts"
MAX_PARALLELISM = 128
START = RoutingTable.contiguous(2, MAX_PARALLELISM)


def records(per_key: int) -> list[tuple[int, int, int]]:
    """`per_key` numbered updates of every key: even keys in the first half (split 0), odd keys
    in the second (split 1), each key's in order."""
    return [(k, seq, 1) for parity in (0, 1) for seq in range(per_key) for k in range(parity, KEYS, 2)]


def counted(previous: tuple[int, int, int], record: tuple[int, int, int]) -> tuple[int, int, int]:
    """The running count of a key, tagged with the sequence number of the update that made it."""
    return (record[0], record[1], previous[2] + 1)


def slow(record: tuple[int, int, int]) -> tuple[int, int, int]:
    time.sleep(0.002)  # about 2 ms a record per worker: room for moves and kills mid-stream
    return record


def job_env(spark: Any, out: str, ckpt: str, per_key: int, *, backups: int = 0,
            web_port: int | None = None) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=spark, batch_size=16, web_port=web_port,
        checkpoint=CheckpointConfig(interval=0.2, directory=ckpt, retain=1_000),
        restart=RestartStrategy(max_restarts=12),
        state=StateConfig(backup_replicas=backups),
    )
    (
        env.from_source(ListSource(records(per_key), splits=2, batch_size=16)).map(slow)
        .key_by(lambda r: r[0]).reduce(counted).uid(UID).sink_to(FileSink(out))
    )
    return env


def used_groups(subtask: int | None = None) -> list[int]:
    """The key groups the keys fall in (those of `subtask` in the starting table)."""
    groups = {key_group_of(k) for k in range(KEYS)}
    return sorted(g for g in groups if subtask is None or START.owners[g] == subtask)


# -- the checks ---------------------------------------------------------------------------------------
def check_output(out: str, per_key: int) -> None:
    """The committed rows are exactly a failure-free run's: `(k, s, s + 1)` once for every key
    `k` and sequence number `s`."""
    committed = collections.Counter(tuple(row) for row in read_committed(out))
    want = collections.Counter((k, s, s + 1) for k in range(KEYS) for s in range(per_key))
    lost, extra = want - committed, committed - want
    assert not lost and not extra, (
        f"{sum(lost.values())} rows lost (e.g. {sorted(lost)[:5]}), {sum(extra.values())} duplicated or "
        f"wrong (e.g. {sorted(extra)[:5]})")


def table_of(storage: CheckpointStorage, checkpoint_id: int | str) -> RoutingTable:
    routing = storage.resolve(checkpoint_id).routing
    return routing if routing is not None else START


def check_owners(ckpt: str, restored: Sequence[RoutingTable] = ()) -> list[tuple[int, RoutingTable]]:
    """In every complete checkpoint each key group is held by exactly one subtask, the one its
    routing table names, or, at a rerouting checkpoint (whose table holds from it on), the one
    the checkpoint before named, or one a parallel recovery restored with (`restored`: its
    first checkpoint may reroute). Returns each checkpoint's table."""
    storage = CheckpointStorage(ckpt, create=False)
    tables: list[tuple[int, RoutingTable]] = []
    previous = START
    for cid in storage.complete_checkpoints():
        op = storage.resolve(cid).operator(UID)
        assert op is not None, f"checkpoint {cid} has no state of {UID!r}"
        holder: dict[int, int] = {}
        for st in op.subtasks:
            for group in st.holds():
                assert group not in holder, f"checkpoint {cid}: key group {group} held by {holder[group]}, {st.subtask}"
                holder[group] = st.subtask
        assert sorted(holder) == list(range(MAX_PARALLELISM)), f"checkpoint {cid}: key groups missing"
        table = table_of(storage, cid)
        held = tuple(holder[g] for g in range(MAX_PARALLELISM))
        assert held in (table.owners, previous.owners, *(t.owners for t in restored)), (
            f"checkpoint {cid}: groups held {held}, its table says {table.owners}, the one before {previous.owners}")
        tables.append((cid, table))
        previous = table
    return tables


# -- moving key groups while the job runs ----------------------------------------------------------
@dataclass
class Mover:
    """A thread that moves random key groups of `handle`'s job, now one at a time per checkpoint,
    now several, now all at once, one request after the other until `stop()`.

    `moving` is set while a request is with the job. Outcomes: `done` moves, `abandoned` (a
    failure ended the move: the restore decides where the groups are), `refused` (the job was
    restarting, another move under way, or the moves moved nothing)."""

    handle: JobHandle
    rng: random.Random
    moving: threading.Event = field(default_factory=threading.Event)
    done: int = 0
    abandoned: int = 0
    refused: int = 0
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mover", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
            assert not self._thread.is_alive(), "a move did not end"
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        groups = used_groups()
        while not self._stop.is_set() and not self.handle.done():
            chosen = self.rng.sample(groups, self.rng.randint(1, len(groups)))
            moves = {g: self.rng.randrange(2) for g in chosen}
            batch = self.rng.choice([None, 1, 2])
            self.moving.set()
            try:
                self.handle.move_key_groups(moves, batch=batch, timeout=90)
                self.done += 1
            except EpochalError as exc:
                if "abandoned" in str(exc):
                    self.abandoned += 1
                else:
                    self.refused += 1
                    time.sleep(0.05)
            except ValueError:  # the moves moved nothing
                self.refused += 1
            except BaseException as exc:  # noqa: BLE001 - a move that timed out: raised by stop()
                self.error = exc
                return
            finally:
                self.moving.clear()


# -- the driver a test kills -------------------------------------------------------------------------
def drive(out: str, ckpt: str, per_key: int, info: str) -> None:
    """The job on a local Spark of this process, its control endpoint's URL and token written to
    `info` (atomically) once it serves them."""
    from pyspark import cloudpickle

    from epochal.cluster.spark import create_session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark = create_session("local[2]")
    handle = job_env(spark, out, ckpt, per_key, web_port=0).execute_async("migrating")
    with open(info + ".tmp", "w") as f:
        json.dump({"url": handle.web_url, "token": handle.token}, f)
    os.rename(info + ".tmp", info)
    handle.result()


if __name__ == "__main__" and sys.argv[1:2] == ["--driver"]:
    drive(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
