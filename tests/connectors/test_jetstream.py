"""JetStreamSource and JetStreamSink against a real `nats-server -js` (in-process jobs; the Spark
worker and driver kills are in tests/fault/test_spark_logs.py): committed output read back with
nats-py, subjects added while running, an idle subject and the watermark, bad messages under
each `on_error`, where reading starts, acknowledgements, a server restarted mid-run and one that
stays away, and the sink's two guards against a repeated commit."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.connectors.jetstream import JetStreamSink, JetStreamSource
from epochal.connectors.log import AvroFormat, EpochOutput, JsonFormat, RawFormat
from epochal.errors import EpochalError, JobFailedError
from epochal.testing import CollectSink
from epochal.windows import Tumbling
from spark_jobs import wait_until

SCHEMA = pa.schema([("user", pa.string()), ("n", pa.int64())])
WINDOWS = pa.schema([("user", pa.string()), ("start", pa.float64()), ("n", pa.int64())])


def _clicks(count: int, shards: int = 3, start: int = 0) -> list[tuple[str, bytes]]:
    return [(f"clicks.{i % shards}", json.dumps({"user": f"u{i % 7}", "n": i}).encode())
            for i in range(start, start + count)]


def _env(tmp_path: Path, parallelism: int = 2, **options: Any) -> StreamEnvironment:
    return StreamEnvironment(parallelism=parallelism, executor="inprocess", batch_size=64,
                             checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")), **options)


def _out(nats_server: Any, stream: str = "OUT") -> list[dict[str, Any]]:
    return [json.loads(data) for _, data, _ in nats_server.messages(stream)]


def _cancel(handle: Any) -> None:
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)


def test_a_stream_copied_to_another_holds_every_message_once(nats_server: Any, tmp_path: Path) -> None:
    nats_server.add_stream("CLICKS", ["clicks.*"])
    nats_server.add_stream("OUT", ["out.>"])
    nats_server.publish(_clicks(2_000))
    env = _env(tmp_path)
    source = JetStreamSource(nats_server.url, "CLICKS", JsonFormat(SCHEMA), bounded=True)
    (env.from_source(source)
        .map(lambda r: {"user": r[0], "n": r[1] * 10})
        .sink_to(JetStreamSink(nats_server.url, "out.copy", JsonFormat(SCHEMA), name="copy")))
    env.execute("copy")
    out = nats_server.messages("OUT")
    assert sorted(json.loads(data)["n"] for _, data, _ in out) == [i * 10 for i in range(2_000)]
    ids = [headers["Nats-Msg-Id"] for _, _, headers in out]
    assert len(set(ids)) == len(ids) and all(i.startswith("copy-") for i in ids)
    # per subject, the stream's order is kept through a parallel job (each subject one split)
    for shard in range(3):
        ours = [json.loads(d)["n"] for s, d, _ in nats_server.messages("CLICKS") if s == f"clicks.{shard}"]
        assert ours == sorted(ours)


def test_subjects_added_while_running_are_read_and_an_idle_one_holds_no_window_back(
    nats_server: Any, tmp_path: Path
) -> None:
    nats_server.add_stream("EV", ["ev.*"])
    nats_server.add_stream("OUT", ["out.>"])
    schema = pa.schema([("user", pa.string()), ("ts", pa.float64())])

    def events(subject: str, times: list[float]) -> list[tuple[str, bytes]]:
        return [(subject, json.dumps({"user": subject, "ts": t}).encode()) for t in times]

    nats_server.publish(events("ev.quiet", [0.5]))  # then nothing: idle
    nats_server.publish(events("ev.busy", [1.0, 2.0, 11.0, 12.0]))
    env = _env(tmp_path)
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts").with_idleness(0.3)
    source = JetStreamSource(nats_server.url, "EV", JsonFormat(schema), discover=0.1)
    (env.from_source(source, watermarks=strategy)
        .key_by("user")
        .window(Tumbling(10.0))
        .count()
        .map(lambda r: {"user": r[0], "start": r[1], "n": r[-1]})
        .sink_to(JetStreamSink(nats_server.url, "out.windows", JsonFormat(WINDOWS))))
    handle = env.execute_async("idle")
    try:
        # ev.busy's window [0, 10) fires although ev.quiet stopped at 0.5: it went idle
        wait_until(lambda: {"user": "ev.busy", "start": 0.0, "n": 2} in _out(nats_server), "the first window fired", 60)
        # a subject found while running; its own records move event time on (had another
        # subject's done so before it was found, its first records would have come late)
        nats_server.publish(events("ev.late", [13.0, 14.0, 25.0]))
        late = {"user": "ev.late", "start": 10.0, "n": 2}
        wait_until(lambda: late in _out(nats_server), "the new subject's window fired", 60)
    finally:
        _cancel(handle)
    fired = sorted((r["user"], r["start"], r["n"]) for r in _out(nats_server))
    assert fired == [("ev.busy", 0.0, 2), ("ev.busy", 10.0, 2), ("ev.late", 10.0, 2), ("ev.quiet", 0.0, 1)]


@pytest.mark.parametrize("policy", ["skip", "dead_letter", "fail"])
def test_bad_messages_follow_on_error(nats_server: Any, tmp_path: Path, policy: str) -> None:
    nats_server.add_stream("IN", ["in.*"])
    nats_server.publish([("in.a", b'{"user": "a", "n": 1}'), ("in.a", b'{"user": '), ("in.a", b"[1, 2]"),
                         ("in.a", b'{"user": "b", "n": 4}')])
    dlq = CollectSink()
    env = _env(tmp_path, parallelism=1, dead_letter=dlq if policy == "dead_letter" else None)
    out = CollectSink()
    env.from_source(JetStreamSource(nats_server.url, "IN", JsonFormat(SCHEMA), bounded=True),
                    on_error=policy, name="clicks").sink_to(out)  # type: ignore[arg-type]
    if policy == "fail":
        with pytest.raises(JobFailedError, match=r"the message at offset 2 of partition 'IN/in.a' does not decode"):
            env.execute("bad")
        return
    result = env.execute("bad")
    assert sorted(out.committed()) == [("a", 1), ("b", 4)]
    if policy == "skip":
        assert result.operator("clicks").skipped_records == 2
    else:
        letters = dlq.committed()
        assert [(d["record"], d["position"]) for d in letters] == [
            ('{"user": ', {"partition": "IN/in.a", "offset": 2}), ("[1, 2]", {"partition": "IN/in.a", "offset": 3})]


def test_start_latest_at_a_time_and_from_a_groups_acknowledged_cursors(nats_server: Any, tmp_path: Path) -> None:
    nats_server.add_stream("S", ["s.*"])
    nats_server.publish([("s.a", b"old-1"), ("s.b", b"old-2")])
    time.sleep(0.05)
    middle = time.time()
    time.sleep(0.05)
    nats_server.publish([("s.a", b"new-3")])

    def read(tag: str, **options: Any) -> list[bytes]:
        env = _env(tmp_path / tag)
        out = CollectSink()
        env.from_source(JetStreamSource(nats_server.url, "S", RawFormat(), bounded=True, **options)).sink_to(out)
        env.execute(tag)
        return sorted(out.committed())

    assert read("latest", start="latest") == []
    assert read("time", start=dt.datetime.fromtimestamp(middle, dt.UTC)) == [b"new-3"]
    # a following job acknowledges as checkpoints complete (escaped keys: '/' and '.' as =2f, =2e)
    env, out = _env(tmp_path / "follow"), CollectSink()
    env.from_source(JetStreamSource(nats_server.url, "S", RawFormat(), start="committed", group="g",
                                    acknowledge=True, discover=0.1)).sink_to(out)
    handle = env.execute_async("follow")
    try:
        wait_until(lambda: (nats_server.kv_get("EPOCHAL_OFFSETS", "g.S=2fs=2ea"),
                            nats_server.kv_get("EPOCHAL_OFFSETS", "g.S=2fs=2eb")) == (b"4", b"3"),
                   "the cursors past each subject's last message were acknowledged", 60)
    finally:
        _cancel(handle)
    assert sorted(out.committed()) == [b"new-3", b"old-1", b"old-2"]
    nats_server.publish([("s.b", b"new-4")])
    assert read("again", start="committed", group="g") == [b"new-4"]


def test_a_server_restarted_mid_run_costs_a_pause_and_not_one_message(nats_server: Any, tmp_path: Path) -> None:
    nats_server.add_stream("CLICKS", ["clicks.*"])
    nats_server.add_stream("OUT", ["out.>"])
    nats_server.publish(_clicks(300))
    env = _env(tmp_path)
    source = JetStreamSource(nats_server.url, "CLICKS", JsonFormat(SCHEMA), discover=0.2)
    env.from_source(source).map(lambda r: {"user": r[0], "n": r[1]}).sink_to(
        JetStreamSink(nats_server.url, "out.x", JsonFormat(SCHEMA)))
    handle = env.execute_async("restart")
    try:
        wait_until(lambda: len(_out(nats_server)) >= 300, "the first messages were committed", 60)
        nats_server.restart(down=1.0)  # reads and commits wait for it
        nats_server.publish(_clicks(300, start=300))
        wait_until(lambda: len(_out(nats_server)) >= 600, "every message was committed", 120)
        time.sleep(0.5)  # a duplicate would have a moment to arrive
        assert handle.status().restarts == 0  # it waited: no attempt failed
    finally:
        _cancel(handle)
    assert sorted(r["n"] for r in _out(nats_server)) == list(range(600))


def test_a_server_away_longer_than_the_timeout_fails_the_job_with_a_clear_message(
    nats_server: Any, tmp_path: Path
) -> None:
    nats_server.add_stream("CLICKS", ["clicks.*"])
    nats_server.publish(_clicks(10))
    env = _env(tmp_path, parallelism=1, restart=RestartStrategy(max_restarts=0))
    source = JetStreamSource(nats_server.url, "CLICKS", JsonFormat(SCHEMA), unavailable_timeout=1.0, discover=0.2)
    out = CollectSink()
    env.from_source(source).sink_to(out)
    handle = env.execute_async("away")
    wait_until(lambda: len(out.committed()) == 10, "the messages were read", 60)
    nats_server.stop()
    started = time.monotonic()
    with pytest.raises(JobFailedError, match=r"JetStreamSource\(nats://127.0.0.1:\d+, stream CLICKS\), partition "
                                              r"'CLICKS/clicks.\d': the server was unreachable for \d+ s"):
        handle.result(timeout=120)
    assert time.monotonic() - started < 20  # the timeout, a try's length past it, and the job's end


def test_the_sink_refuses_a_subject_no_stream_captures_before_the_job_starts(nats_server: Any, tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.from_source(JetStreamSource(nats_server.url, "NONE", RawFormat(), bounded=True)).sink_to(CollectSink())
    with pytest.raises(EpochalError, match="JetStreamSource.*no such stream"):
        env.execute("missing")
    sink = JetStreamSink(nats_server.url, "nowhere.x", RawFormat())
    with pytest.raises(EpochalError, match="no JetStream stream captures subject 'nowhere.x'"):
        sink.check(resuming=False)


def test_a_repeated_commit_publishes_nothing_by_marker_or_by_message_id(nats_server: Any) -> None:
    nats_server.add_stream("OUT", ["out.>"], duplicate_window=60.0)
    sink = JetStreamSink(nats_server.url, "out.x", RawFormat())
    epoch = EpochOutput("w-abc-s0", 0, 7, (b"a", b"b", b"c"), "out.x")
    sink.commit([epoch])
    sink.commit([epoch])  # the marker says 7 is in
    assert nats_server.kv_get("EPOCHAL_SINKS", "w-abc-s0") == b"7"
    # a crash after publishing, before the marker: within the window the ids deduplicate
    other = EpochOutput("w-def-s1", 1, 3, (b"x", b"y"), "out.x")
    sink._connection().call(sink._publish(sink._connection(), other, 10.0), "publishing")
    sink.commit([other])
    assert [d for _, d, _ in nats_server.messages("OUT")] == [b"a", b"b", b"c", b"x", b"y"]


def test_avro_records_round_trip_through_a_stream(nats_server: Any, tmp_path: Path) -> None:
    avro = {"type": "record", "name": "Click", "fields": [
        {"name": "user", "type": "string"}, {"name": "n", "type": "long"},
        {"name": "page", "type": ["null", "string"], "default": None}]}
    nats_server.add_stream("AV", ["av.>"])
    nats_server.add_stream("AV2", ["av2.>"])
    fmt = AvroFormat(avro)
    nats_server.publish([("av.1", p) for p in fmt.encode([{"user": "u", "n": i, "page": None} for i in range(50)])])
    env = _env(tmp_path)
    env.from_source(JetStreamSource(nats_server.url, "AV", fmt, bounded=True)).sink_to(
        JetStreamSink(nats_server.url, "av2.x", fmt))
    env.execute("avro")
    got = fmt.decode([d for _, d, _ in nats_server.messages("AV2")]).batch.to_pylist()
    assert sorted(r["n"] for r in got) == list(range(50)) and {r["page"] for r in got} == {None}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.integers(1, 9), st.integers(1, 9))
def test_any_interleaving_of_subjects_reads_back_each_subject_in_order(
    nats_server: Any, shards: list[int], fetch: int, piece: int
) -> None:
    """Subjects of one stream share its sequence: each subject's split must skip the others'
    messages, stop at the bounded end whatever subject has the last one, and resume exactly."""
    stream = f"H{uuid.uuid4().hex[:8]}"
    nats_server.add_stream(stream, [f"{stream}.*"])
    nats_server.publish([(f"{stream}.{s}", str(i).encode()) for i, s in enumerate(shards)])
    source = JetStreamSource(nats_server.url, stream, RawFormat(), bounded=True)
    source.check()
    got: dict[str, list[int]] = {}
    for split in source.splits():
        position, rows = None, []
        while True:  # a new reader from the last position for every piece: a restore each time
            reader = source.open_split(split, position)
            batch: Any = []
            deadline = time.monotonic() + 30
            while batch is not None and not len(batch):
                batch = reader.read(fetch if position is None else piece)
                assert time.monotonic() < deadline
            position = reader.position()
            reader.close()
            if batch is None:
                break
            rows += [int(v) for v in batch.column("value").to_pylist()]
        got[split.partition] = rows
    want: dict[str, list[int]] = {}
    for i, s in enumerate(shards):
        want.setdefault(f"{stream}/{stream}.{s}", []).append(i)
    assert got == want


def test_streams_matching_a_pattern_are_partitions_and_new_ones_are_found(nats_server: Any, tmp_path: Path) -> None:
    nats_server.add_stream("ORDERS-EU", ["orders.eu"])
    nats_server.publish([("orders.eu", b"eu-1"), ("orders.eu", b"eu-2")])
    source = JetStreamSource(nats_server.url, "ORDERS-*", RawFormat(), partition="stream", discover=0.1,
                             metadata=("partition", "key"))
    env = _env(tmp_path)
    out = CollectSink()
    env.from_source(source).sink_to(out)
    handle = env.execute_async("streams")
    try:
        wait_until(lambda: len(out.committed()) == 2, "the first stream was read", 60)
        nats_server.add_stream("ORDERS-US", ["orders.us"])  # created while the job runs
        nats_server.add_stream("OTHER", ["other"])  # does not match
        nats_server.publish([("orders.us", b"us-1"), ("other", b"no")])
        wait_until(lambda: len(out.committed()) == 3, "the new stream was read", 60)
    finally:
        _cancel(handle)
    assert sorted(out.committed()) == [(b"eu-1", "ORDERS-EU", "orders.eu"), (b"eu-2", "ORDERS-EU", "orders.eu"),
                                       (b"us-1", "ORDERS-US", "orders.us")]


def test_a_job_stopped_and_resumed_reads_on_from_its_cursors_and_new_subjects_from_their_start(
    nats_server: Any, tmp_path: Path
) -> None:
    """Unbounded, `start="latest"`: the resumed job goes on where the checkpoint stood on the old
    subjects (what came meanwhile included) and reads a subject created meanwhile whole."""
    nats_server.add_stream("CLICKS", ["clicks.*"])
    nats_server.add_stream("OUT", ["out.>"])
    nats_server.publish(_clicks(50))  # before the first start: not read (start="latest")

    def job() -> Any:
        env = _env(tmp_path)
        source = JetStreamSource(nats_server.url, "CLICKS", JsonFormat(SCHEMA), start="latest", discover=0.1)
        env.from_source(source).map(lambda r: {"user": r[0], "n": r[1]}).sink_to(
            JetStreamSink(nats_server.url, "out.x", JsonFormat(SCHEMA)))
        return env

    handle = job().execute_async("resume")
    try:
        time.sleep(1.0)  # the source has listed the subjects (and fixed their starts) by now
        nats_server.publish(_clicks(60, start=100))
        wait_until(lambda: len(_out(nats_server)) >= 60, "the first run committed what came after its start", 60)
    finally:
        _cancel(handle)
    nats_server.publish(_clicks(30, start=200))  # meanwhile, on the old subjects
    nats_server.publish([("clicks.new", json.dumps({"user": "z", "n": 300 + i}).encode()) for i in range(5)])
    handle = job().execute_async("resume", from_checkpoint="latest")
    try:
        wait_until(lambda: len(_out(nats_server)) >= 95, "the resumed run committed the rest", 60)
        time.sleep(0.5)  # a duplicate would have a moment to arrive
    finally:
        _cancel(handle)
    assert sorted(r["n"] for r in _out(nats_server)) == [*range(100, 160), *range(200, 230), *range(300, 305)]
