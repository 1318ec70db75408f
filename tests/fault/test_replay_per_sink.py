"""Every exactly-once sink is idempotent per epoch (issue 38): the newest checkpoint is found
corrupt at a restore after the sink committed its epoch, so the job restores the one before and
replays the refused epoch at its cut (`state.replay`); the sink recognises the epoch it
committed (by its lineage, subtask and checkpoint id) and commits nothing twice. The output,
read back from the real target (files, a Delta table, PostgreSQL, JetStream, Redis), is exact.

Without the skip the replayed epoch's records come twice: the test fails then (each sink's
lineage was checked to matter by running it with a fresh lineage per attempt: duplicates)."""

from __future__ import annotations

import collections
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.api.connector import Sink, SinkWriter
from epochal.connectors import FileSink, ParquetSink, read_committed
from epochal.errors import InjectedFailure
from epochal.testing import ListSource
from faulty_fs import FAULTS, faulty_filesystem

WORDS = [f"w{i % 23}" for i in range(2000)]
SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64())])


@pytest.fixture(autouse=True)
def _clear_faults() -> Iterator[None]:
    FAULTS.clear()
    yield
    FAULTS.clear()


def _expected() -> list[tuple[str, int]]:
    totals = collections.Counter(WORDS)
    return sorted((w, n) for w, c in totals.items() for n in range(1, c + 1))


class _Recording(Sink):
    """The sink under test, noting which checkpoints' epochs it committed (the test crashes the
    job once the newest complete checkpoint's epoch is committed)."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.committed: set[int] = set()

    def check(self, resuming: bool) -> None:
        self.inner.check(resuming)

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _RecordingWriter(self.inner.create_writer(subtask, parallelism))

    def commit(self, committables: list[Any]) -> None:
        self.inner.commit([c for _, c in committables])
        self.committed.update(checkpoint_id for checkpoint_id, _ in committables)


class _RecordingWriter(SinkWriter):
    def __init__(self, inner: SinkWriter) -> None:
        self.inner = inner

    def set_lineage(self, lineage: str) -> None:
        self.inner.set_lineage(lineage)

    def write(self, batch: Any) -> None:
        self.inner.write(batch)

    def prepare_commit(self, checkpoint_id: int) -> Any:
        committable = self.inner.prepare_commit(checkpoint_id)
        return None if committable is None else (checkpoint_id, committable)

    def recover(self) -> None:
        self.inner.recover()

    def close(self) -> None:
        self.inner.close()


def _replay_job(tmp_path: Path, sink: Sink) -> tuple[Any, list[str]]:
    """The word count into `sink`, crashed once three checkpoints completed and the newest's
    epoch was committed, with the next state file read (the restore's, of that checkpoint)
    corrupt: refused, the one before restored, its epoch replayed at its cut."""
    recording = _Recording(sink)
    manifests = tmp_path / "ckpt"
    crashed: list[Any] = []

    def crash_once(word: str) -> str:
        time.sleep(0.0004)
        if not crashed:
            complete = sorted(int(m.parent.name[4:]) for m in manifests.glob("chk-*/MANIFEST.json"))
            if len(complete) >= 3 and complete[-1] in recording.committed:
                crashed.append(FAULTS.arm("flip", ".keyed", times=1))
                raise InjectedFailure("crash")
        return word

    env = StreamEnvironment(
        parallelism=2, executor="inprocess", batch_size=32,
        checkpoint=CheckpointConfig(directory=str(manifests), filesystem=faulty_filesystem(), interval=0.05,
                                    tolerable_failures=3, merge_files=False),  # a .keyed file to flip
        restart=RestartStrategy(max_restarts=3, delay=0.0),
    )
    env.from_source(ListSource(WORDS, splits=2)).map(crash_once).key_by(lambda w: w).count().sink_to(recording)
    result = env.execute("replay-per-sink")
    assert crashed and crashed[0].hits, "the corruption never struck"
    return result, crashed[0].hits


def _check_replayed(result: Any, hits: list[str], messages: list[str]) -> None:
    struck = int(hits[0].split("chk-")[1][:8])
    assert any(re.search(rf"checkpoint(\(s\))? \[?{struck}\]? refused", m) for m in messages), messages
    assert any(f"replaying the epochs of checkpoint(s) [{struck}] at their cuts" in m for m in messages), messages
    restored = [c for c in result.restored_from if c is not None]
    assert restored and restored[-1] < struck


def _file_sink(tmp_path: Path, _: Any) -> tuple[Sink, Callable[[], list[tuple[str, int]]]]:
    out = str(tmp_path / "out")
    return FileSink(out), lambda: sorted((w, n) for w, n in read_committed(out))


def _partitioned_parquet(tmp_path: Path, _: Any) -> tuple[Sink, Callable[[], list[tuple[str, int]]]]:
    out = tmp_path / "out"
    schema = pa.schema([("word", pa.string()), ("n", pa.int64()), ("b", pa.int64())])

    class ByBucket(ParquetSink):  # a third column to partition by: n % 3
        def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
            writer = super().create_writer(subtask, parallelism)
            write = writer.write
            writer.write = lambda batch: write([(w, n, n % 3) for w, n in batch])  # type: ignore[method-assign]
            return writer

    def read() -> list[tuple[str, int]]:
        rows = [(w, n) for f in out.rglob("part-*.parquet") for w, n in zip(*pq.read_table(f).to_pydict().values())]
        return sorted(rows)

    return ByBucket(str(out), schema=schema, partition_by=["b"]), read


def _delta(tmp_path: Path, _: Any) -> tuple[Sink, Callable[[], list[tuple[str, int]]]]:
    deltalake = pytest.importorskip("deltalake")
    from epochal.connectors import DeltaSink

    out = str(tmp_path / "delta")

    def read() -> list[tuple[str, int]]:
        table = deltalake.DeltaTable(out)
        result = pa.table(deltalake.QueryBuilder().register("t", table).execute("SELECT word, n FROM t").read_all())
        return sorted(zip(result.column("word").to_pylist(), result.column("n").to_pylist()))

    return DeltaSink(out, schema=SCHEMA), read


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Sink, Callable[[], list[tuple[str, int]]]]:
    psycopg = pytest.importorskip("psycopg")
    from epochal.connectors import PostgresSink

    dsn = request.getfixturevalue("pg_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE words (word text, n bigint)")

    def read() -> list[tuple[str, int]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return sorted(conn.execute("SELECT word, n FROM words").fetchall())

    return PostgresSink(dsn, "words"), read


def _jetstream(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Sink, Callable[[], list[tuple[str, int]]]]:
    from epochal.connectors.jetstream import JetStreamSink
    from epochal.connectors.log import JsonFormat

    server = request.getfixturevalue("nats_server")
    server.add_stream("OUT", ["out.>"])

    def read() -> list[tuple[str, int]]:
        return sorted((m["word"], m["n"]) for m in (json.loads(d) for _, d, _ in server.messages("OUT")))

    return JetStreamSink(server.url, "out.words", JsonFormat(SCHEMA), name="words"), read


def _redis(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Sink, Callable[[], list[tuple[str, int]]]]:
    from epochal.connectors.log import JsonFormat
    from epochal.connectors.redis_streams import RedisStreamSink

    server = request.getfixturevalue("redis_server")

    def read() -> list[tuple[str, int]]:
        return sorted((m["word"], m["n"]) for m in (json.loads(p) for p in server.entries("out")))

    return RedisStreamSink(server.url, "out", JsonFormat(SCHEMA), name="words"), read


SINKS = {
    "FileSink": _file_sink,
    "ParquetSink-partitioned": _partitioned_parquet,
    "DeltaSink": _delta,
    "PostgresSink": _postgres,
    "JetStreamSink": _jetstream,
    "RedisStreamSink": _redis,
}


@pytest.mark.parametrize("kind", list(SINKS))
def test_a_refused_checkpoint_s_epoch_replayed_at_its_cut_is_committed_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    sink, read = SINKS[kind](tmp_path, request)
    with caplog.at_level(logging.INFO):
        result, hits = _replay_job(tmp_path, sink)
    _check_replayed(result, hits, [r.getMessage() for r in caplog.records])
    got = read()
    duplicates = len(got) - len(set(got))
    assert got == _expected(), f"{kind}: {duplicates} duplicates, {len(set(_expected()) - set(got))} missing"
