"""The log connectors' record formats: what a sink encodes, a source decodes back, row for row;
messages that are not rows are told apart, one by one, whatever surrounds them."""

from __future__ import annotations

import datetime as dt
import json
import pickle

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.connectors.log import AvroFormat, JsonFormat, RawFormat

SCHEMA = pa.schema([("user", pa.string()), ("n", pa.int64()), ("score", pa.float64()), ("ok", pa.bool_())])
rows = st.lists(st.fixed_dictionaries({
    "user": st.one_of(st.none(), st.text(max_size=8)),
    "n": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "score": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    "ok": st.one_of(st.none(), st.booleans()),
}), max_size=30)


@settings(max_examples=200, deadline=None)
@given(rows)
def test_json_rows_written_by_a_sink_read_back_as_the_same_rows(records: list[dict]) -> None:
    fmt = JsonFormat(SCHEMA)
    batch = pa.RecordBatch.from_pylist(records, schema=SCHEMA)
    for payloads in (fmt.encode(batch), fmt.encode(records)):  # columnar and per-record writers agree
        decoded = fmt.decode(payloads)
        assert decoded.bad == [] and decoded.batch.to_pylist() == records


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["good", "pretty", "broken", "array", "empty", "wrong type", "extra"]), max_size=25))
def test_bad_json_messages_are_found_one_by_one_among_good_ones(kinds: list[str]) -> None:
    fmt = JsonFormat(pa.schema([("n", pa.int64())]))
    payloads = [{
        "good": b'{"n": %d}' % i, "pretty": b'{\n  "n":\r\n %d\n}' % i, "broken": b'{"n": ', "array": b"[1]",
        "empty": b"", "wrong type": b'{"n": "x"}', "extra": b'{"n": %d, "more": [1, {"a": null}]}' % i,
    }[kind] for i, kind in enumerate(kinds)]
    decoded = fmt.decode(payloads)
    good = [i for i, k in enumerate(kinds) if k in ("good", "pretty", "extra")]
    assert decoded.batch.column("n").to_pylist() == good
    assert [i for i, _ in decoded.bad] == [i for i, k in enumerate(kinds) if k not in ("good", "pretty", "extra")]


def test_json_timestamps_and_tuples_by_the_schema_s_names() -> None:
    fmt = JsonFormat(pa.schema([("user", pa.string()), ("ts", pa.timestamp("s"))]))
    decoded = fmt.decode([b'{"user": "a", "ts": "2026-11-28T10:00:00"}'])
    assert decoded.batch.to_pylist() == [{"user": "a", "ts": dt.datetime(2026, 11, 28, 10)}]
    assert fmt.encode(decoded.batch) == [b'{"user":"a","ts":"2026-11-28T10:00:00"}']
    assert json.loads(fmt.encode([("b", None)])[0]) == {"user": "b", "ts": None}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1),
                          st.one_of(st.none(), st.text(max_size=4))), max_size=20))
def test_avro_records_round_trip_and_survive_pickling(records: list[tuple]) -> None:
    fmt = AvroFormat({"type": "record", "name": "R", "fields": [
        {"name": "user", "type": "string"}, {"name": "n", "type": "long"},
        {"name": "page", "type": ["null", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    payloads = pickle.loads(pickle.dumps(fmt)).encode([{"user": u, "n": n, "page": p, "at": at} for u, n, p in records])
    decoded = fmt.decode(payloads + [b"\x01"])
    assert [(r["user"], r["n"], r["page"], r["at"]) for r in decoded.batch.to_pylist()] == [
        (u, n, p, at) for u, n, p in records]
    assert [i for i, _ in decoded.bad] == [len(records)]
    assert decoded.batch.schema.field("at").type == pa.timestamp("ms", tz="UTC")


def test_avro_refuses_a_schema_it_cannot_make_columns_of() -> None:
    with pytest.raises(ValueError, match="must be an Avro record"):
        AvroFormat({"type": "string"})
    with pytest.raises(ValueError, match=r"the union \['int', 'string'\] has no Arrow column type"):
        AvroFormat({"type": "record", "name": "R", "fields": [{"name": "x", "type": ["int", "string"]}]})


def test_raw_bytes_as_they_are() -> None:
    fmt = RawFormat()
    assert fmt.decode([b"a", b"", b"\xff"]).batch.column("value").to_pylist() == [b"a", b"", b"\xff"]
    assert fmt.encode(["é", b"x"]) == ["é".encode(), b"x"]
    assert fmt.encode(pa.record_batch({"k": [1], "value": [b"v"]})) == [b"v"]
    with pytest.raises(TypeError, match="RawFormat writes bytes or str, not int"):
        fmt.encode([3])
