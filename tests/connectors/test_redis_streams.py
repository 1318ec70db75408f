"""RedisStreamSource and RedisStreamSink against a real `redis-server` (in-process jobs; the Spark
worker and driver kills are in tests/fault/test_spark_logs.py): committed output read back with
redis-py, streams added while running, an idle stream and the watermark, bad entries under each
`on_error`, where reading starts, acknowledgements as a consumer group's last-delivered ID, a
server restarted mid-run and one that stays away, and a repeated commit."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.connectors.log import EpochOutput, JsonFormat, RawFormat
from epochal.connectors.redis_streams import RedisStreamSink, RedisStreamSource
from epochal.errors import EpochalError, JobFailedError
from epochal.testing import CollectSink
from epochal.windows import Tumbling
from spark_jobs import wait_until

SCHEMA = pa.schema([("user", pa.string()), ("n", pa.int64())])
WINDOWS = pa.schema([("user", pa.string()), ("start", pa.float64()), ("n", pa.int64())])


def _clicks(count: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"user": f"u{i % 7}", "n": i}).encode() for i in range(start, start + count)]


def _env(tmp_path: Path, parallelism: int = 2, **options: Any) -> StreamEnvironment:
    return StreamEnvironment(parallelism=parallelism, executor="inprocess", batch_size=64,
                             checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")), **options)


def _out(redis_server: Any, stream: str = "out") -> list[dict[str, Any]]:
    return [json.loads(p) for p in redis_server.entries(stream)]


def _cancel(handle: Any) -> None:
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)


def test_streams_copied_to_another_hold_every_entry_once(redis_server: Any, tmp_path: Path) -> None:
    for shard in range(3):
        redis_server.add(f"clicks:{shard}", _clicks(700, start=shard * 700))
    env = _env(tmp_path)
    (env.from_source(RedisStreamSource(redis_server.url, "clicks:*", JsonFormat(SCHEMA), bounded=True))
        .map(lambda r: {"user": r[0], "n": r[1] * 10})
        .sink_to(RedisStreamSink(redis_server.url, "out", JsonFormat(SCHEMA), name="copy")))
    env.execute("copy")
    assert sorted(r["n"] for r in _out(redis_server)) == [i * 10 for i in range(2_100)]
    markers = redis_server.client().keys("epochal:commits:copy-*")
    assert len(markers) == 2  # one per writer (sink subtask) of the attempt


def test_streams_added_while_running_are_read_and_an_idle_one_holds_no_window_back(
    redis_server: Any, tmp_path: Path
) -> None:
    schema = pa.schema([("user", pa.string()), ("ts", pa.float64())])

    def events(stream: str, times: list[float]) -> None:
        redis_server.add(stream, [json.dumps({"user": stream, "ts": t}).encode() for t in times])

    events("ev:quiet", [0.5])  # then nothing: idle
    events("ev:busy", [1.0, 2.0, 11.0, 12.0])
    env = _env(tmp_path)
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts").with_idleness(0.3)
    (env.from_source(RedisStreamSource(redis_server.url, "ev:*", JsonFormat(schema), discover=0.1),
                     watermarks=strategy)
        .key_by("user")
        .window(Tumbling(10.0))
        .count()
        .map(lambda r: {"user": r[0], "start": r[1], "n": r[-1]})
        .sink_to(RedisStreamSink(redis_server.url, "out", JsonFormat(WINDOWS))))
    handle = env.execute_async("idle")
    try:
        wait_until(lambda: {"user": "ev:busy", "start": 0.0, "n": 2} in _out(redis_server), "the first window", 60)
        events("ev:late", [13.0, 14.0, 25.0])  # a stream created while running, found by the pattern
        wait_until(lambda: {"user": "ev:late", "start": 10.0, "n": 2} in _out(redis_server), "its window", 60)
    finally:
        _cancel(handle)
    fired = sorted((r["user"], r["start"], r["n"]) for r in _out(redis_server))
    assert fired == [("ev:busy", 0.0, 2), ("ev:busy", 10.0, 2), ("ev:late", 10.0, 2), ("ev:quiet", 0.0, 1)]


@pytest.mark.parametrize("policy", ["skip", "dead_letter", "fail"])
def test_bad_entries_follow_on_error(redis_server: Any, tmp_path: Path, policy: str) -> None:
    ids = redis_server.add("in", [b'{"user": "a", "n": 1}', b"{oops", b'{"user": "b", "n": 4}'])
    redis_server.client().xadd("in", {"other": b"no data field"})
    dlq = CollectSink()
    env = _env(tmp_path, parallelism=1, dead_letter=dlq if policy == "dead_letter" else None)
    out = CollectSink()
    env.from_source(RedisStreamSource(redis_server.url, "in", JsonFormat(SCHEMA), bounded=True),
                    on_error=policy, name="clicks").sink_to(out)  # type: ignore[arg-type]
    if policy == "fail":
        with pytest.raises(JobFailedError, match=rf"the message at offset {ids[1]} of partition 'in' does not decode"):
            env.execute("bad")
        return
    result = env.execute("bad")
    assert sorted(out.committed()) == [("a", 1), ("b", 4)]
    if policy == "skip":
        assert result.operator("clicks").skipped_records == 2
    else:
        letters = [(d["record"], d["position"]["offset"], d["error"][:20]) for d in dlq.committed()]
        assert letters[0] == ("{oops", ids[1], "not JSON: Expecting ")
        assert letters[1][0] == "other=no data field" and "has no field 'data'" in dlq.committed()[1]["error"]


def test_start_latest_at_a_time_and_from_a_groups_acknowledged_id(redis_server: Any, tmp_path: Path) -> None:
    redis_server.add("s:a", [b"old-1"])
    redis_server.add("s:b", [b"old-2"])
    time.sleep(0.01)
    middle = time.time()
    time.sleep(0.01)
    redis_server.add("s:a", [b"new-3"])

    def read(tag: str, **options: Any) -> list[bytes]:
        env = _env(tmp_path / tag)
        out = CollectSink()
        env.from_source(RedisStreamSource(redis_server.url, ["s:a", "s:b"], RawFormat(), bounded=True, **options)
                        ).sink_to(out)
        env.execute(tag)
        return sorted(out.committed())

    assert read("latest", start="latest") == []
    assert read("time", start=middle) == [b"new-3"]
    client = redis_server.client()

    def lag_of_g(stream: str) -> Any:  # what monitoring shows: the group's lag
        groups = {g["name"].decode(): g for g in client.xinfo_groups(stream)} if client.exists(stream) else {}
        return groups["g"]["lag"] if "g" in groups else None

    env, out = _env(tmp_path / "follow"), CollectSink()  # a following job acknowledges as it goes
    env.from_source(RedisStreamSource(redis_server.url, ["s:a", "s:b"], RawFormat(), start="committed", group="g",
                                      acknowledge=True, discover=0.1)).sink_to(out)
    handle = env.execute_async("follow")
    try:
        wait_until(lambda: (lag_of_g("s:a"), lag_of_g("s:b")) == (0, 0), "every entry was acknowledged", 60)
    finally:
        _cancel(handle)
    assert sorted(out.committed()) == [b"new-3", b"old-1", b"old-2"]
    groups = {g["name"].decode(): g for g in client.xinfo_groups("s:a")}
    assert groups["g"]["last-delivered-id"] == client.xrevrange("s:a", count=1)[0][0]
    redis_server.add("s:b", [b"new-4"])
    assert read("again", start="committed", group="g") == [b"new-4"]


def test_a_server_restarted_mid_run_costs_a_pause_and_not_one_entry(redis_server: Any, tmp_path: Path) -> None:
    redis_server.add("clicks:0", _clicks(300))
    env = _env(tmp_path)
    env.from_source(RedisStreamSource(redis_server.url, "clicks:*", JsonFormat(SCHEMA), discover=0.2)).map(
        lambda r: {"user": r[0], "n": r[1]}).sink_to(RedisStreamSink(redis_server.url, "out", JsonFormat(SCHEMA)))
    handle = env.execute_async("restart")
    try:
        wait_until(lambda: len(_out(redis_server)) >= 300, "the first entries were committed", 60)
        redis_server.restart(down=1.0)  # reads and commits wait for it
        redis_server.add("clicks:1", _clicks(300, start=300))
        wait_until(lambda: len(_out(redis_server)) >= 600, "every entry was committed", 120)
        time.sleep(0.5)  # a duplicate would have a moment to arrive
        assert handle.status().restarts == 0  # it waited: no attempt failed
    finally:
        _cancel(handle)
    assert sorted(r["n"] for r in _out(redis_server)) == list(range(600))


def test_a_server_away_longer_than_the_timeout_fails_the_job_with_a_clear_message(
    redis_server: Any, tmp_path: Path
) -> None:
    redis_server.add("clicks", _clicks(10))
    env = _env(tmp_path, parallelism=1, restart=RestartStrategy(max_restarts=0))
    out = CollectSink()
    env.from_source(RedisStreamSource(redis_server.url, "clicks", JsonFormat(SCHEMA), unavailable_timeout=1.0)
                    ).sink_to(out)
    handle = env.execute_async("away")
    wait_until(lambda: len(out.committed()) == 10, "the entries were read", 60)
    redis_server.stop()
    with pytest.raises(JobFailedError, match=r"RedisStreamSource\(redis://127.0.0.1:\d+/0, clicks\), partition "
                                              r"'clicks': the server was unreachable for \d+ s"):
        handle.result(timeout=120)
    sink = RedisStreamSink(redis_server.url, "out", RawFormat())
    with pytest.raises(EpochalError, match=r"RedisStreamSink\(redis://127.0.0.1:\d+/0, out\): cannot reach the server"):
        sink.check(resuming=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 6)), min_size=1, max_size=8))
def test_commits_in_any_order_and_repetition_append_each_epoch_once(redis_server: Any, epochs: list[Any]) -> None:
    """Writers' epochs committed in order per writer, each possibly repeated (after a failure,
    or by a zombie of the old attempt): every epoch's entries appear once, in one piece."""
    redis_server.client().flushdb()  # the server is the test's; each example starts empty
    sink = RedisStreamSink(redis_server.url, "out", RawFormat(), prefix="m")
    committed: dict[str, int] = {}
    want: list[bytes] = []
    for size, writer_no in epochs:
        writer = f"w{writer_no % 3}"
        checkpoint = committed.get(writer, 0) + (1 if writer_no < 4 else 0)  # 4..6: repeat the last one
        epoch = EpochOutput(writer, 0, checkpoint, tuple(f"{writer}/{checkpoint}/{i}".encode() for i in range(size)),
                            "out")
        if checkpoint > committed.get(writer, 0):
            committed[writer] = checkpoint
            want.extend(epoch.payloads)
        if checkpoint:
            sink.commit([epoch])
    assert redis_server.entries("out") == want
