"""The log-source framework over an in-memory log (`memory_log`): reading in any pieces and
restoring anywhere hands out every record once, bad messages included; where reading starts;
bounded stops; a server that is away; acknowledgements after a checkpoint completes.

The adapters' own tests (`test_jetstream.py`, `test_redis_streams.py`) run the same contract
against real servers; these find the framework's edge cases, with Hypothesis where it can."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, JobCancelledError, StreamEnvironment
from epochal.connectors.log import JsonFormat, LogPosition, RawFormat
from epochal.errors import EpochalError, JobFailedError
from epochal.testing import CollectSink
from memory_log import LOGS, MemoryLog, MemoryLogSource
from spark_jobs import wait_until

SCHEMA = pa.schema([("n", pa.int64())])


def _log(**partitions: list[bytes]) -> str:
    name = uuid.uuid4().hex
    LOGS[name] = MemoryLog()
    for partition, payloads in partitions.items():
        LOGS[name].append(partition, payloads)
    return name


def _drain(reader: Any, sizes: list[int], deadline: float = 10.0) -> tuple[list[int], list[Any], bool]:
    """Read until the split ends or the sizes run out: the `n` handed out, the rejected input,
    and whether it ended."""
    rows: list[int] = []
    rejected: list[Any] = []
    give_up = time.monotonic() + deadline
    for size in sizes:
        while True:
            batch = reader.read(size)
            rejected.extend(reader.rejected())
            if batch is None:
                return rows, rejected, True
            if len(batch):
                rows.extend(batch.column("n").to_pylist())
                break
            assert time.monotonic() < give_up, "the reader handed nothing out"
            time.sleep(0.001)  # the fetcher thread is fetching
    return rows, rejected, False


messages = st.lists(st.tuples(st.booleans(), st.integers(0, 10**6)), max_size=40)  # (is it good, n)


@settings(max_examples=60, deadline=None)
@given(messages, st.lists(st.integers(1, 7), min_size=1, max_size=12), st.integers(1, 9))
def test_reading_in_any_pieces_and_restoring_anywhere_hands_out_every_message_once(
    log: list[tuple[bool, int]], pieces: list[int], fetch: int
) -> None:
    payloads = [json.dumps({"n": n}).encode() if good else b'{"n": ' for good, n in log]
    name = _log(p=payloads)
    source = MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True)
    source.check()
    (split,) = source.splits()
    rows: list[int] = []
    rejected: list[Any] = []
    position: Any = None
    for size in pieces + [fetch] * (len(log) + 1):  # each piece read by a reader restored from the last
        reader = source.open_split(split, position)
        reader.tolerate_bad_input()
        got, bad, ended = _drain(reader, [fetch, size])  # the first read fixes the fetcher's size
        position = reader.position()
        reader.close()
        rows += got
        rejected += bad
        if ended:
            break
    assert rows == [n for good, n in log if good]
    assert [r.position["offset"] for r in rejected] == [i for i, (good, _) in enumerate(log) if not good]
    assert all(r.record == '{"n": ' and "not JSON" in r.error for r in rejected)
    assert position == LogPosition(len(log), len(log))


def test_a_bad_message_fails_the_read_naming_the_partition_and_offset() -> None:
    name = _log(p=[b'{"n": 1}', b"not json", b'{"n": 3}'])
    source = MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True)
    reader = source.open_split(source.splits()[0], None)
    with pytest.raises(EpochalError, match=r"the message at offset 1 of partition 'p' does not decode .*'not json'"):
        _drain(reader, [10] * 100)
    reader.close()


def test_where_reading_starts_and_partitions_found_later_start_at_their_beginning() -> None:
    name = _log(a=[b"1", b"2"], b=[b"3"])
    log = LOGS[name]
    latest = MemoryLogSource(name, RawFormat(), start="latest")
    assert [(s.partition, s.start) for s in latest.splits()] == [("a", 2), ("b", 1)]
    log.append("c", [b"4", b"5"])  # created after the job started: every record is new (FLIP-288)
    log.append("a", [b"6"])
    assert [(s.partition, s.start) for s in latest.splits()] == [("a", 2), ("b", 1), ("c", 0)]

    resumed = MemoryLogSource(name, RawFormat(), start="latest")
    resumed.check()  # the driver's start checks list the log before the job master restores its split log
    resumed.resumed(latest.splits()[:1])  # a checkpoint's split log holds `a` only
    assert [(s.partition, s.start) for s in resumed.splits()] == [("a", 2), ("b", 0), ("c", 0)]

    log.committed[("g", "a")] = 1
    committed = MemoryLogSource(name, RawFormat(), start="committed", group="g")
    assert [s.start for s in committed.splits()] == [1, 0, 0]  # the group's cursor, else the earliest

    log.append("d", [b"x"], timestamp=100.0)
    log.append("d", [b"y"], timestamp=200.0)
    at = MemoryLogSource(name, RawFormat(), start=150.0)
    assert {s.partition: s.start for s in at.splits()}["d"] == 1


def test_bounded_mode_stops_at_the_end_seen_at_the_start_even_after_a_restore() -> None:
    name = _log(p=[json.dumps({"n": i}).encode() for i in range(5)])
    source = MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True)
    source.check()  # the driver fixes the stops
    LOGS[name].append("p", [b'{"n": 99}'])
    (split,) = source.splits()
    assert split.stop == 5
    reader = source.open_split(split, None)
    rows, _, _ = _drain(reader, [2])
    position = reader.position()
    reader.close()
    assert rows == [0, 1] and position == LogPosition(2, 5)
    again = MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True)  # a resumed program re-resolves...
    reader = again.open_split(again.splits()[0], position)  # ...but the position keeps the first stop
    rest, _, ended = _drain(reader, [10] * 10)
    reader.close()
    assert rest == [2, 3, 4] and ended


def test_a_server_away_for_a_while_costs_a_pause_and_one_away_too_long_fails_clearly() -> None:
    name = _log(p=[json.dumps({"n": i}).encode() for i in range(3)])
    log = LOGS[name]
    source = MemoryLogSource(name, JsonFormat(SCHEMA), unavailable_timeout=5.0)
    split = source.splits()[0]
    log.down_until = time.monotonic() + 0.5
    reader = source.open_split(split, None)
    rows, _, _ = _drain(reader, [10])
    log.append("p", [b'{"n": 3}'])
    rows += _drain(reader, [10])[0]
    reader.close()
    assert rows == [0, 1, 2, 3]

    short = MemoryLogSource(name, JsonFormat(SCHEMA), unavailable_timeout=0.3)
    log.down_until = time.monotonic() + 60
    reader = short.open_split(split, LogPosition(4, None))
    with pytest.raises(EpochalError, match=r"MemoryLogSource\(.*\), partition 'p': the server was unreachable for"):
        _drain(reader, [10] * 1000, deadline=30)
    reader.close()


def test_cursors_are_acknowledged_after_each_checkpoint_and_a_new_job_can_start_from_them(tmp_path: Any) -> None:
    name = _log(a=[json.dumps({"n": i}).encode() for i in range(200)], b=[b'{"n": -1}'])
    log = LOGS[name]

    def env(ckpt: str) -> StreamEnvironment:
        return StreamEnvironment(parallelism=2, executor="inprocess", batch_size=16,
                                 checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / ckpt)))

    first, out = env("c1"), CollectSink()
    first.from_source(MemoryLogSource(name, JsonFormat(SCHEMA), discover=0.05, group="g", acknowledge=True)
                      ).sink_to(out)
    handle = first.execute_async("acks")
    try:
        wait_until(lambda: log.committed == {("g", "a"): 200, ("g", "b"): 1}, "every cursor was acknowledged", 60)
    finally:
        handle.cancel()
        with pytest.raises(JobCancelledError):
            handle.result(timeout=60)
    assert sorted(out.committed()) == sorted([-1, *range(200)])
    assert any(0 < a.get("a", 0) < 200 for a in log.acks)  # acknowledged as it went, not only at the end
    log.append("a", [b'{"n": 200}'])
    second, out = env("c2"), CollectSink()
    second.from_source(MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True, start="committed", group="g")
                       ).sink_to(out)
    second.execute("from-acks")
    assert out.committed() == [200]  # the group's cursors: only what came since


def test_a_job_over_a_log_that_is_away_longer_than_the_timeout_fails_with_its_name(tmp_path: Any) -> None:
    name = _log(p=[b'{"n": 1}'])
    LOGS[name].down_until = time.monotonic() + 600
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    env.from_source(MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True)).sink_to(CollectSink())
    with pytest.raises(EpochalError, match="MemoryLogSource.*cannot list the partitions"):
        env.execute("away")  # the start checks, before any attempt
    LOGS[name].down_until = 0.0
    source = MemoryLogSource(name, JsonFormat(SCHEMA), bounded=True, unavailable_timeout=0.2)
    source.check()
    LOGS[name].down_until = time.monotonic() + 600
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "d")))
    env.from_source(source).sink_to(CollectSink())
    with pytest.raises(JobFailedError, match="the server was unreachable for"):
        env.execute("away-later")
