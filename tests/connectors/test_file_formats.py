"""ParquetSource, JsonLinesSource and CsvSource: every record once, in file order, from any cut
into splits and any restore from a position; bad input names the file and the place; a
watched directory of Parquet files through a crash, exactly once."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, JobCancelledError, JobFailedError, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import CsvSource, JsonLinesSource, ParquetSource
from epochal.errors import InjectedFailure
from epochal.testing import CollectSink
from spark_jobs import wait_until


def read_all(source: Any, batch: int = 7, reopen: bool = False) -> list[dict[str, Any]]:
    """Every record of every split; with `reopen`, a new reader from the position after each
    batch (as a restore would open it)."""
    rows: list[dict[str, Any]] = []
    for split in source.splits():
        reader = source.open_split(split, None)
        while (got := reader.read(batch)) is not None:
            rows.extend(got.to_pylist())
            if reopen:
                reader = source.open_split(split, reader.position())
    return rows


def _records(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": seed * 10_000 + i, "user": f"u{rng.randrange(9)}", "amount": rng.randrange(1000)} for i in range(n)]


# -- Parquet ---------------------------------------------------------------------------------------
def test_parquet_rows_come_a_row_group_per_split_and_resume_at_their_row(tmp_path: Path) -> None:
    expected = []
    for i in range(3):
        records = _records(i, 250)
        pq.write_table(pa.Table.from_pylist(records), tmp_path / f"part-{i}.parquet", row_group_size=100)
        expected.extend(records)
    (tmp_path / "_SUCCESS").write_text("")
    source = ParquetSource(tmp_path)
    source.check()
    assert len(source.splits()) == 9  # three row groups per file
    assert read_all(source) == read_all(source, reopen=True) == expected
    assert read_all(ParquetSource(tmp_path, columns=["id"])) == [{"id": r["id"]} for r in expected]


def test_a_corrupt_parquet_file_fails_the_job_naming_it(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(_records(0, 10)), tmp_path / "good.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 this is not parquet")
    env = StreamEnvironment(executor="inprocess", restart=RestartStrategy(max_restarts=0))
    env.from_source(ParquetSource(tmp_path)).sink_to(CollectSink())
    with pytest.raises(JobFailedError, match=r"operator 'source'.*bad\.parquet: not a readable Parquet file"):
        env.execute("corrupt")


def test_a_watched_parquet_directory_through_a_crash_sums_every_row_once(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()

    def land(i: int) -> list[dict[str, Any]]:
        records = _records(i, 300)
        pq.write_table(pa.Table.from_pylist(records), inbox / f".f{i}.parquet", row_group_size=64)
        (inbox / f".f{i}.parquet").rename(inbox / f"f{i}.parquet")
        return records

    crashed: list[int] = []

    def check(row: tuple[int, str, int]) -> tuple[int, str, int]:  # per-record: a row is a tuple
        if row[0] == 20_150 and not crashed:  # in f2
            crashed.append(1)
            raise InjectedFailure("crash")
        return row

    records = land(0)
    env = StreamEnvironment(
        parallelism=2,
        executor="inprocess",
        checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=2, delay=0.0),
    )
    sink = CollectSink()
    (env.from_source(ParquetSource(inbox, watch=0.05)).map(check).map(lambda r: (r[1], r[2]))
        .key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink))
    handle = env.execute_async("parquet-inbox")
    for i in range(1, 4):
        records += land(i)
    totals = collections.Counter()
    for r in records:
        totals[r["user"]] += r["amount"]

    def newest() -> dict[str, int]:
        return {k: v for k, v in sorted(sink.committed(), key=lambda kv: kv[1])}

    wait_until(lambda: newest() == dict(totals) or handle.done(), "every row is summed")
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=30)
    assert crashed and handle.status().restarts == 1
    assert newest() == dict(totals)
    per_user = collections.Counter(k for k, _ in sink.committed())
    assert sum(per_user.values()) == len(records)  # one running sum per row: none twice


# -- JSON lines --------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.fixed_dictionaries({"id": st.integers(0, 10**6), "tag": st.text("abc é\"", max_size=8)}), max_size=60),
    st.integers(8, 400),
    st.booleans(),
)
def test_json_lines_any_split_size_and_restore_give_each_record_once(
    tmp_path_factory: pytest.TempPathFactory, records: list[dict[str, Any]], split_size: int, crlf: bool
) -> None:
    directory = tmp_path_factory.mktemp("jsonl")
    end = "\r\n" if crlf else "\n"
    blank = {i for i in range(len(records)) if i % 7 == 3}  # blank lines are skipped
    text = "".join(json.dumps(r, ensure_ascii=False) + end + "\n" * (i in blank) for i, r in enumerate(records))
    (directory / "a.jsonl").write_text(text, encoding="utf-8")
    schema = pa.schema([("id", pa.int64()), ("tag", pa.string())])
    source = JsonLinesSource(directory, schema=schema, split_size=split_size)
    assert read_all(source) == records
    assert read_all(source, batch=3, reopen=True) == records


def test_a_bad_json_line_names_the_file_the_byte_and_the_line(tmp_path: Path) -> None:
    good = '{"id": 1}\n'
    (tmp_path / "events.jsonl").write_text(good * 3 + '{"id": 2,\n' + good)
    env = StreamEnvironment(executor="inprocess", restart=RestartStrategy(max_restarts=0))
    env.from_source(JsonLinesSource(tmp_path)).sink_to(CollectSink())
    with pytest.raises(JobFailedError, match=r"events\.jsonl: the line at byte 30 does not parse .*'\{\"id\": 2,'"):
        env.execute("bad-json")


# -- CSV -------------------------------------------------------------------------------------------
def test_csv_columns_come_from_the_header_or_the_schema(tmp_path: Path) -> None:
    records = _records(1, 120)
    pcsv.write_csv(pa.Table.from_pylist(records), tmp_path / "a.csv")
    source = CsvSource(tmp_path, split_size=300)
    assert len(source.splits()) > 3
    assert read_all(source) == read_all(source, reopen=True) == records
    schema = pa.schema([("id", pa.string()), ("user", pa.string()), ("amount", pa.float64())])
    typed = read_all(CsvSource(tmp_path, schema=schema, split_size=300))
    assert typed == [{"id": str(r["id"]), "user": r["user"], "amount": float(r["amount"])} for r in records]
    (tmp_path / "a.csv").write_text("\n".join(f"{r['id']};{r['user']};{r['amount']}" for r in records) + "\n")
    headless = read_all(CsvSource(tmp_path, schema=schema, header=False, delimiter=";"))
    assert headless == typed
    with pytest.raises(ValueError, match="without a header, a schema must name the columns"):
        CsvSource(tmp_path, header=False)


def test_a_csv_row_with_a_field_too_many_names_the_file_and_the_byte(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n3,4,5\n6,7\n")
    env = StreamEnvironment(executor="inprocess", restart=RestartStrategy(max_restarts=0))
    env.from_source(CsvSource(tmp_path)).sink_to(CollectSink())
    with pytest.raises(JobFailedError, match=r"rows\.csv: the line at byte 8 does not parse .*'3,4,5'"):
        env.execute("bad-csv")


# -- bad input, skipped or dead-lettered -------------------------------------------------------------
def _bad_jsonl(directory: Path) -> list[dict[str, Any]]:
    """Good records with a broken line every 50th, and a last line that is broken too."""
    good, lines = [], []
    for i in range(400):
        if i % 50 == 7:
            lines.append(f'{{"id": {i}, "user": ')
        else:
            good.append({"id": i, "user": f"u{i % 5}"})
            lines.append(json.dumps(good[-1]))
    lines.append('{"id": "broken')
    (directory / "events.jsonl").write_text("\n".join(lines) + "\n")
    return good


@pytest.mark.parametrize("policy", ["skip", "dead_letter"])
def test_lines_that_do_not_parse_are_skipped_or_dead_lettered_exactly_once(tmp_path: Path, policy: str) -> None:
    (tmp_path / "in").mkdir()
    good = _bad_jsonl(tmp_path / "in")
    dlq, out = CollectSink(), CollectSink()
    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=0.02, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=2, delay=0.0),
        dead_letter=dlq,
        batch_size=16,
    )
    crashed: list[int] = []

    def crash_once(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if row[0] == 333 and not crashed:  # after several bad lines were passed and checkpointed
            crashed.append(1)
            raise InjectedFailure("crash")
        return row

    schema = pa.schema([("id", pa.int64()), ("user", pa.string())])
    source = JsonLinesSource(tmp_path / "in", schema=schema, split_size=3_000)
    env.from_source(source, on_error=policy).map(crash_once).sink_to(out)  # type: ignore[arg-type]
    result = InProcessExecutor(seed=2, virtual_time=True, step_time=0.01).execute(env.job_graph("bad-lines"))
    assert result.restarts == 1 and result.restored_from[1] is not None  # a restore, not a fresh start
    assert sorted(out.committed()) == sorted((r["id"], r["user"]) for r in good)
    letters = dlq.committed()
    if policy == "skip":
        # the last attempt re-read only what followed its checkpoint; the whole job's count
        # (carried in the checkpoint) counts each bad line once
        since = {m.name: m for m in result.operators_since}["source"].skipped_records
        assert letters == [] and 0 < since < 9 and result.operator("source").skipped_records == 9
    else:
        assert sorted(letter["record"] for letter in letters) == sorted(
            [f'{{"id": {i}, "user": ' for i in range(7, 400, 50)] + ['{"id": "broken']
        )
        assert all(letter["operator"] == "source" and letter["position"]["file"].endswith("events.jsonl")
                   for letter in letters)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_watched_json_lines_and_csv_files_are_each_read_once(tmp_path: Path, fmt: str) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    schema = pa.schema([("id", pa.int64()), ("user", pa.string()), ("amount", pa.int64())])

    def land(i: int) -> None:
        table = pa.Table.from_pylist(_records(i, 200), schema=schema)
        staged = inbox / f".f{i}.{fmt}"
        if fmt == "csv":
            pcsv.write_csv(table, staged)
        else:
            staged.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
        staged.rename(inbox / f"f{i}.{fmt}")

    land(0)
    source = (JsonLinesSource(inbox, schema=schema, watch=0.05, split_size=2_000) if fmt == "jsonl"
              else CsvSource(inbox, schema=schema, watch=0.05, split_size=2_000))
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    sink = CollectSink()
    env.from_source(source).map(lambda r: r[0]).sink_to(sink)
    handle = env.execute_async(f"watched-{fmt}")
    for i in range(1, 4):
        land(i)
    want = sorted(r["id"] for i in range(4) for r in _records(i, 200))
    wait_until(lambda: len(sink.committed()) >= len(want) or handle.done(), "every file is read")
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=30)
    assert sorted(sink.committed()) == want
