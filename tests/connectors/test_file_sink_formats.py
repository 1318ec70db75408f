"""FileSink's formats (JSON lines, CSV, Parquet) from Python records and from Arrow batches, the
vectorized JSON encoding against json.dumps, file names, modes over files of the new formats,
exactly once across a crash, and the sink on a real S3-compatible server (moto), where a commit
copies the staged object and stays idempotent when repeated after a failure."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import json
import math
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from epochal import CheckpointConfig, EpochalError, RestartStrategy, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.connectors import FileSink, read_committed
from epochal.errors import CheckpointError
from epochal.testing import Crash, ListSource

FORMATS = ["jsonl", "csv", "parquet"]
RECORDS = [("to", 1), ("be", 2), ('say "hi", then go', 3), ("naïve\tline", -4)]
WORDS = ["to", "be", "or", "not", "to", "be"]
UPDATES = collections.Counter([("to", 1), ("be", 1), ("or", 1), ("not", 1), ("to", 2), ("be", 2)])
COMMITTED = r"part-\d{5}-\d{8}-[0-9a-f]{12}\.%s"


def _write(sink: FileSink, *batches: Any, checkpoint_id: int = 1) -> Any:
    """What one sink subtask does between two checkpoints, and the commit."""
    sink.check(resuming=False)
    writer = sink.create_writer(0, 1)
    for batch in batches:
        writer.write(batch)
    pending = writer.prepare_commit(checkpoint_id)
    sink.commit([pending])
    writer.close()
    return pending


def _arrow(records: list[tuple[Any, ...]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{f"f{i}": v for i, v in enumerate(r)} for r in records])


def _part_files(out: Path) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.startswith("part-"))


# -- records in, the same records out -----------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", ["records", "arrow"])
def test_each_format_reads_back_the_records_it_was_given(tmp_path: Path, fmt: str, shape: str) -> None:
    out = tmp_path / "out"
    batches = [RECORDS[:2], RECORDS[2:]] if shape == "records" else [_arrow(RECORDS[:2]), _arrow(RECORDS[2:])]
    pending = _write(FileSink(out, format=fmt), *batches)
    assert [tuple(r) for r in read_committed(str(out))] == RECORDS
    assert re.fullmatch(COMMITTED % fmt, os.path.basename(pending.final))
    assert _part_files(out) == [os.path.basename(pending.final)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_column_rows_read_back_as_bare_values_in_every_format(tmp_path: Path, fmt: str) -> None:
    """The JSON line of a one-column row is the bare value; CSV and Parquet rows read back alike."""
    _write(FileSink(tmp_path / "a", format=fmt), ["x", "y"], pa.record_batch({"word": ["z"]}))
    assert read_committed(tmp_path / "a") == ["x", "y", "z"]


def test_csv_has_one_header_per_file_and_columns_named_as_parquet_sink_names_them(tmp_path: Path) -> None:
    pending = _write(FileSink(tmp_path, format="csv", mode="append"), RECORDS[:1], RECORDS[1:2], _arrow(RECORDS[2:]))
    text = Path(pending.final).read_text()
    assert text.splitlines()[0] == '"f0","f1"' and text.count('"f0"') == 1
    assert pcsv.read_csv(pending.final).to_pylist()[0] == {"f0": "to", "f1": 1}


def test_dicts_become_columns_by_key(tmp_path: Path) -> None:
    rows = [{"word": "to", "n": 1}, {"word": "be", "n": 2}]
    pending = _write(FileSink(tmp_path / "p", format="parquet"), rows)
    assert pq.read_table(pending.final).to_pylist() == rows
    assert read_committed(tmp_path / "p") == [["to", 1], ["be", 2]]


def test_a_schema_types_columns_that_start_with_none(tmp_path: Path) -> None:
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    pending = _write(FileSink(tmp_path, format="parquet", schema=schema), [("to", None)], [("be", 2)])
    assert pq.read_schema(pending.final).equals(schema)
    assert read_committed(tmp_path) == [["to", None], ["be", 2]]


def test_parquet_is_one_file_per_subtask_and_checkpoint_each_complete_when_it_appears(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, format="parquet")
    sink.check(resuming=False)
    writer = sink.create_writer(3, 4)
    writer.write(RECORDS[:2])
    writer.write(_arrow(RECORDS[2:3]))
    first = writer.prepare_commit(7)
    staged = os.path.basename(first.staging)
    assert re.fullmatch(r"\.part-00003-[0-9a-f]{12}\.inprogress", staged) and _part_files(tmp_path) == []
    assert pq.read_metadata(first.staging).num_rows == 3  # closed at prepare_commit: a whole file
    writer.write(RECORDS[3:])
    second = writer.prepare_commit(8)
    assert writer.prepare_commit(9) is None  # nothing written: no file
    sink.commit([first, second])
    names = _part_files(tmp_path)
    assert [n.split("-")[1:3] for n in names] == [["00003", "00000007"], ["00003", "00000008"]]
    assert [tuple(r) for r in read_committed(tmp_path)] == RECORDS


def test_empty_batches_make_no_file(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, format="csv")
    writer = sink.create_writer(0, 1)
    writer.write([])
    writer.write(_arrow(RECORDS).slice(0, 0))
    assert writer.prepare_commit(1) is None and os.listdir(tmp_path) == []


# -- the vectorized JSON lines -----------------------------------------------------------------------------
def _jsonl_both_ways(batch: pa.RecordBatch) -> tuple[str, str]:
    """The file of the vectorized path, and of the per-record path (json.dumps of each record)."""
    dumps = lambda r: json.dumps(r, separators=(",", ":"), ensure_ascii=False)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:  # not tmp_path: hypothesis calls a test many times
        vectorized = _write(FileSink(os.path.join(tmp, "v")), batch)
        per_record = _write(FileSink(os.path.join(tmp, "r"), encode=dumps), batch)
        return Path(vectorized.final).read_text("utf-8"), Path(per_record.final).read_text("utf-8")


TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SCALARS = st.tuples(st.none() | TEXT, st.none() | st.integers(-(2**63), 2**63 - 1), st.none() | st.booleans())


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(SCALARS, min_size=1, max_size=20), start=st.integers(0, 3))
@example(rows=[('a"b\\c', 1, True), ("\n\r\t\b\f\x00\x1f\x7f\u2028é😀", None, None), (None, -(2**63), False)], start=0)
def test_arrow_strings_ints_bools_and_nulls_are_written_byte_for_byte_as_json_dumps_writes_them(
    rows: list[tuple[Any, ...]], start: int
) -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array([r[i] for r in rows], t) for i, t in enumerate([pa.string(), pa.int64(), pa.bool_()])],
        names=["s", "i", "b"],
    ).slice(start)  # a slice: its buffers hold the rows before it
    if batch.num_rows:
        vectorized, per_record = _jsonl_both_ways(batch)
        assert vectorized == per_record


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.none() | st.floats(), min_size=1, max_size=20), single=st.booleans())
@example(values=[math.nan, math.inf, -math.inf, -0.0, 1.0, 1e16, 1e-5, 0.1, None], single=False)
def test_arrow_floats_read_back_as_the_same_floats(values: list[float | None], single: bool) -> None:
    columns = {"x": pa.array(values, pa.float64())} | ({} if single else {"y": pa.array(values, pa.float32())})
    vectorized, per_record = _jsonl_both_ways(pa.record_batch(columns))

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, float) and math.isnan(a):
            return isinstance(b, float) and math.isnan(b)
        return type(a) is type(b) and a == b  # 1.0 stays a float, never the int 1

    lines, expected = vectorized.splitlines(), per_record.splitlines()
    assert len(lines) == len(expected)
    assert all(same(json.loads(a), json.loads(b)) for a, b in zip(lines, expected))


def test_other_arrow_types_are_encoded_value_by_value_as_before(tmp_path: Path) -> None:
    batch = pa.record_batch({
        "words": pa.array([["a", "b"], None], pa.list_(pa.string())),
        "point": pa.array([{"x": 1, "y": 2.5}, {"x": None, "y": 0.0}]),
        "kind": pa.array(["p", "q"]).dictionary_encode(),
        "nothing": pa.nulls(2),
    })
    vectorized, per_record = _jsonl_both_ways(batch)
    assert vectorized == per_record == '[["a","b"],{"x":1,"y":2.5},"p",null]\n[null,{"x":null,"y":0.0},"q",null]\n'


def test_values_json_has_no_type_for_are_written_as_spark_writes_them(tmp_path: Path) -> None:
    """Times as ISO 8601, decimals as their exact text, bytes as base64, numpy scalars as values:
    a record read from Arrow (a timestamp column: late records, windows) can always be written."""
    at = dt.datetime(2026, 11, 28, 9, 0, 5)
    batch = pa.record_batch({
        "at": pa.array([at], pa.timestamp("s")), "utc": pa.array([at], pa.timestamp("ms", tz="UTC")),
        "day": pa.array([at.date()]), "price": pa.array([decimal.Decimal("1.10")]), "raw": pa.array([b"\x00\xff"]),
    })
    records = [(at, at.date(), at.time(), decimal.Decimal("1.10"), b"\x00\xff", np.int64(7), np.float32(0.5),
                dt.timedelta(minutes=2))]
    _write(FileSink(tmp_path / "t"), batch, records)
    assert read_committed(tmp_path / "t") == [
        ["2026-11-28T09:00:05", "2026-11-28T09:00:05+00:00", "2026-11-28", "1.10", "AP8="],
        ["2026-11-28T09:00:05", "2026-11-28", "09:00:05", "1.10", "AP8=", 7, 0.5, 120.0],
    ]
    with pytest.raises(TypeError, match="not JSON serializable"):  # anything else still fails, naming its type
        _write(FileSink(tmp_path / "u"), [(object(),)])


# -- names, options and modes ---------------------------------------------------------------------------------
def test_options_that_do_not_fit_the_format_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format must be 'jsonl' or 'csv' or 'parquet'"):
        FileSink(tmp_path, format="json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='encode is for format="jsonl"'):
        FileSink(tmp_path, encode=str, format="csv")
    with pytest.raises(ValueError, match='schema is for format="csv" or "parquet"'):
        FileSink(tmp_path, schema=pa.schema([("x", pa.int64())]))


def _run(out: Path, fmt: str, mode: str = "error") -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    counts = env.from_source(ListSource(WORDS, splits=2)).key_by(lambda w: w).count()
    counts.sink_to(FileSink(out, mode=mode, format=fmt))  # type: ignore[arg-type]
    env.execute("modes")


def _committed(out: Path) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r) for r in read_committed(out))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_modes_treat_csv_and_parquet_files_as_a_file_sink_s_own(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    _run(out, fmt)
    first = _part_files(out)
    assert first and all(re.fullmatch(COMMITTED % fmt, n) for n in first)
    with pytest.raises(EpochalError, match=rf"already holds output \(part-\d{{5}}-\d{{8}}-[0-9a-f]{{12}}\.{fmt}"):
        _run(out, fmt)
    _run(out, fmt, mode="append")
    assert _committed(out) == UPDATES + UPDATES
    (out / f"part-0.{fmt}").write_text("not FileSink's")  # a part-* name FileSink never gives
    (out / ".part-00001-0123456789ab.inprogress").write_text("stale")
    _run(out, fmt, mode="overwrite")
    assert f"part-0.{fmt}" in os.listdir(out) and ".part-00001-0123456789ab.inprogress" not in os.listdir(out)
    (out / f"part-0.{fmt}").unlink()
    assert _committed(out) == UPDATES and not set(first) & set(_part_files(out))


def test_overwrite_replaces_output_of_another_format(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(out, "jsonl")
    _run(out, "parquet", mode="overwrite")
    assert {n.rsplit(".", 1)[1] for n in _part_files(out)} == {"parquet"}
    assert _committed(out) == UPDATES


# -- exactly once across a crash ------------------------------------------------------------------------------
N_RECORDS = 400
CRASH_AT = 350  # late in the second split: checkpoints complete before it whatever the seed


def _items(crash_at: int | None) -> list[Any]:
    half = N_RECORDS // 2
    items: list[Any] = [(f"k{i // half}-{(i * 31) % 7}", i) for i in range(N_RECORDS)]
    if crash_at is not None:
        items.insert(crash_at, Crash())
    return items


def _counts_through_a_file_sink(out: str, ckpt: str, fmt: str, arrow: bool, crash_at: int | None) -> Any:
    env = StreamEnvironment(
        parallelism=2,
        checkpoint=CheckpointConfig(interval=0.005, directory=ckpt),
        executor="inprocess",
        restart=RestartStrategy(max_restarts=3, delay=0.0),
    )
    stream = env.from_source(ListSource(_items(crash_at), splits=2, batch_size=3))
    if arrow:  # the columnar count: Arrow batches reach the sink
        counts = stream.map_batches(lambda b: b).key_by("f0").count()
    else:
        counts = stream.key_by(lambda r: r[0]).count()
    counts.sink_to(FileSink(out, format=fmt))  # type: ignore[arg-type]
    return InProcessExecutor(seed=4, virtual_time=True, step_time=0.001).execute(env.job_graph("formats"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("arrow", [False, True], ids=["records", "arrow"])
def test_every_format_is_exactly_once_across_a_crash(tmp_path: Path, fmt: str, arrow: bool) -> None:
    outputs = []
    for crash_at in (None, CRASH_AT):
        tag = "crash" if crash_at is not None else "clean"
        out = tmp_path / f"out-{tag}"
        result = _counts_through_a_file_sink(str(out), str(tmp_path / f"ckpt-{tag}"), fmt, arrow, crash_at)
        assert result.restarts == (0 if crash_at is None else 1)
        if crash_at is not None:
            assert result.restored_from[1] is not None  # restored from a checkpoint, not from scratch
        assert not [n for n in os.listdir(out) if n.endswith(".inprogress")]
        assert all(re.fullmatch(COMMITTED % fmt, n) for n in _part_files(out))
        outputs.append(sorted(map(tuple, read_committed(out))))
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == N_RECORDS


# -- an object store ------------------------------------------------------------------------------------------
def _listing(fs: Any, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector

    return sorted(i.base_name for i in fs.get_file_info(FileSelector(prefix, allow_not_found=True)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_on_s3_a_job_through_a_crash_commits_every_record_once(s3: Any, tmp_path: Path, fmt: str) -> None:
    fs, bucket = s3.filesystem(), f"sink-{uuid.uuid4().hex[:8]}"
    fs.create_dir(bucket)
    out = s3.uri(bucket, "out")
    arrow = fmt == "csv"  # one format through the columnar count, so both paths meet S3
    result = _counts_through_a_file_sink(out, str(tmp_path / "ckpt"), fmt, arrow, CRASH_AT)
    assert result.restarts == 1 and result.restored_from[1] is not None
    names = _listing(fs, f"{bucket}/out")
    assert names and all(re.fullmatch(COMMITTED % fmt, n) for n in names)  # no staging object left
    _counts_through_a_file_sink(str(tmp_path / "local"), str(tmp_path / "ckpt-local"), fmt, False, None)
    assert sorted(map(tuple, read_committed(out))) == sorted(map(tuple, read_committed(tmp_path / "local")))


def test_on_s3_a_commit_repeated_after_a_failure_changes_nothing(s3: Any) -> None:
    fs, bucket = s3.filesystem(), f"commit-{uuid.uuid4().hex[:8]}"
    fs.create_dir(bucket)
    sink = FileSink(s3.uri(bucket, "out"), format="jsonl")
    sink.check(resuming=False)
    writer = sink.create_writer(0, 1)
    writer.write(RECORDS)
    pending = writer.prepare_commit(1)
    final = os.path.basename(pending.final)
    fs.copy_file(pending.staging, pending.final)  # a commit cut short after its copy
    sink.commit([pending])
    assert _listing(fs, f"{bucket}/out") == [final]
    sink.commit([pending])  # and once more, as a restore repeats it
    assert _listing(fs, f"{bucket}/out") == [final]
    assert [tuple(r) for r in read_committed(s3.uri(bucket, "out"))] == RECORDS
    with pytest.raises(EpochalError, match="already holds output"):
        FileSink(s3.uri(bucket, "out")).check(resuming=False)
    fs.delete_file(pending.final)
    with pytest.raises(CheckpointError, match="is gone and .* does not exist"):
        sink.commit([pending])
