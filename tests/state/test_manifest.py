"""Tests of `epochal.state.manifest`: the manifest records and their JSON codec."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochal.errors import CorruptCheckpointError
from epochal.state.manifest import (
    FORMAT_VERSION,
    FileHandle,
    Manifest,
    OperatorState,
    SplitLogState,
    SubtaskState,
    TaskCheckpointStats,
    checkpoint_of_path,
)
from epochal.state.plain import from_plain, to_plain

DATA = Path(__file__).parent / "data"

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
finite = st.floats(allow_nan=False, allow_infinity=False)
handles = st.builds(
    FileHandle, names, st.integers(min_value=0, max_value=2**40), st.text("0123456789abcdef", min_size=64, max_size=64),
    st.none() | st.integers(min_value=0, max_value=2**40),  # a segment of a merged file, or a file
)
subtasks = st.builds(
    SubtaskState,
    st.integers(min_value=0, max_value=64),
    st.integers(min_value=0, max_value=128),
    st.integers(min_value=0, max_value=128),
    st.none() | handles,
    st.none() | handles,
    st.lists(handles, max_size=3).map(tuple),
)
operators = st.builds(
    OperatorState,
    names,
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=1, max_value=32768),
    st.lists(subtasks, max_size=3).map(tuple),
)
manifests = st.builds(
    Manifest,
    checkpoint_id=st.integers(min_value=1, max_value=2**40),
    job_name=names,
    created_at=finite,
    duration_ms=finite,
    operators=st.lists(operators, max_size=3).map(tuple),
    tasks=st.lists(
        st.builds(TaskCheckpointStats, names, finite, finite, finite, st.integers(min_value=0)), max_size=3
    ).map(tuple),
    is_final=st.booleans(),
    is_savepoint=st.booleans(),
    location=names,
    merged=st.lists(handles.map(lambda h: dataclasses.replace(h, offset=None)), max_size=2).map(tuple),
    coordinator_ms=finite,
)


def _stored(manifest: Manifest) -> Manifest:
    return dataclasses.replace(manifest, location="")


@given(manifests)
@settings(max_examples=150)
def test_every_field_round_trips(manifest: Manifest) -> None:
    loaded = Manifest.from_json(manifest.to_json(), source="m")
    assert loaded == manifest
    # `location` is where a manifest was read, not part of it (and not compared): never stored
    assert loaded.location == ""
    for a, b in zip(dataclasses.astuple(loaded), dataclasses.astuple(_stored(manifest)), strict=True):
        assert a == b and type(a) is type(b)


@given(manifests)
@settings(max_examples=50)
def test_the_body_is_the_stored_fields_as_asdict_gives_them(manifest: Manifest) -> None:
    body = json.loads(manifest.to_json())["manifest"]
    expected = _without_sparse_defaults(json.loads(json.dumps(dataclasses.asdict(manifest))))
    del expected["location"]
    expected.pop("replay", None)  # the job master's, not stored
    assert body == {**expected, "format_version": FORMAT_VERSION}


def _without_sparse_defaults(plain: object) -> object:
    """What `to_plain` leaves out: a handle's offset when it names a whole file, no merged files
    and no patches."""
    if isinstance(plain, list):
        return [_without_sparse_defaults(v) for v in plain]
    if isinstance(plain, dict):
        return {k: _without_sparse_defaults(v) for k, v in plain.items()
                if not (k == "offset" and v is None) and not (k in ("merged", "patches") and v == [])}
    return plain


def test_a_version_1_manifest_loads() -> None:
    """Written by the code of format version 1 (indented; no chains, no savepoint flag)."""
    manifest = Manifest.from_json((DATA / "manifest-v1.json").read_bytes(), source="v1")
    digest = "ab" * 32
    assert manifest == Manifest(
        checkpoint_id=3,
        job_name="wordcount",
        created_at=1700000000.25,
        duration_ms=12.5,
        operators=(
            OperatorState(
                "count",
                2,
                128,
                (
                    SubtaskState(0, 0, 64, FileHandle("chk-00000003/count-0.keyed", 120, digest), None),
                    SubtaskState(1, 64, 128, None, FileHandle("chk-00000003/count-1.op", 7, digest)),
                ),
            ),
        ),
        tasks=(TaskCheckpointStats("v1[0]", 0.25, 1.5, 3.0, 467),),
        is_final=True,
    )
    assert manifest.operators[0].subtasks[0].keyed_base == () and not manifest.is_savepoint


def test_a_version_2_manifest_loads_and_is_written_byte_for_byte_the_same() -> None:
    data = (DATA / "manifest-v2.json").read_bytes()
    manifest = Manifest.from_json(data, source="v2")
    chain = manifest.operators[0].subtasks[0].keyed_chain()
    assert [h.path for h in chain] == [
        "chk-00000001/count-0.keyed",
        "chk-00000002/count-0.keyed",
        "chk-00000003/count-0.keyed",
    ]
    assert [h.size for h in chain] == [300, 40, 120]
    assert manifest.tasks == (TaskCheckpointStats("v1[0]", 0.25, 1.5, 3.0, 467),)
    assert manifest.split_logs == ()
    # written again, it is version 6: the same fields, no split logs, no routing table, no key
    # group sets (contiguous ranges), no merged files or patches (left out), no record counts (not
    # known) and no costs it did not record
    old, new = json.loads(data)["manifest"], json.loads(manifest.to_json())["manifest"]
    assert (old.pop("format_version"), new.pop("format_version")) == (2, 6)
    assert new.pop("split_logs") == [] and new.pop("routing") is None and new.pop("counts") is None
    assert new.pop("coordinator_ms") == 0.0 and "merged" not in new and "patches" not in new
    for task in new["tasks"]:
        assert task.pop("barrier_ms") == 0.0
    for op in new["operators"]:
        for sub in op["subtasks"]:
            assert sub.pop("key_groups") is None
    assert new == old


def test_split_logs_round_trip_and_their_segments_are_files_of_the_checkpoint() -> None:
    segments = (
        FileHandle("chk-00000002/split-log-0", 90, "a" * 64),
        FileHandle("chk-00000005/split-log-0", 40, "b" * 64),
    )
    manifest = Manifest(5, "j", 0.0, 0.0, (), split_logs=(SplitLogState("files", 7, segments),))
    again = Manifest.from_json(manifest.to_json(), source="m")
    assert again == manifest and again.split_log("files") == SplitLogState("files", 7, segments)
    assert list(again.files()) == list(segments)
    assert again.written_size() == 40


def _forged(body: dict[str, object]) -> bytes:
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({"manifest": body, "sha256": hashlib.sha256(payload.encode()).hexdigest()}).encode()


def test_manifest_of_an_unknown_format_version_is_rejected() -> None:
    body = json.loads(Manifest(1, "j", 0.0, 0.0, ()).to_json())["manifest"]
    body["format_version"] = 99
    with pytest.raises(CorruptCheckpointError, match="format"):
        Manifest.from_json(_forged(body), source="m")


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.update(checkpoint_id="3"),  # a string where an int belongs
        lambda b: b.update(is_final=1),  # an int where a bool belongs
        lambda b: b.update(surprise=True),  # a field no version has
        lambda b: b.pop("job_name"),  # a field without default missing
        lambda b: b["operators"][0]["subtasks"][0].update(keyed=[1, 2]),
        lambda b: b["operators"][0].update(subtasks={}),
    ],
)
def test_a_well_formed_but_mistyped_manifest_is_rejected(change) -> None:  # noqa: ANN001
    manifest = Manifest.from_json((DATA / "manifest-v2.json").read_bytes(), source="v2")
    body = json.loads(manifest.to_json())["manifest"]
    change(body)
    with pytest.raises(CorruptCheckpointError, match="unreadable manifest"):
        Manifest.from_json(_forged(body), source="m")


def test_the_converter_coerces_ints_to_floats_only() -> None:
    plain = {"task": "t", "alignment_ms": 1, "sync_ms": 0, "async_ms": 2.5, "bytes": 3}
    loaded = from_plain(TaskCheckpointStats, plain)
    assert loaded == TaskCheckpointStats("t", 1.0, 0.0, 2.5, 3) and type(loaded.alignment_ms) is float
    with pytest.raises(ValueError):
        from_plain(FileHandle, {"path": "p", "size": 1.0, "sha256": "x"})
    assert to_plain(FileHandle("p", 1, "x")) == {"path": "p", "size": 1, "sha256": "x"}


def test_manifest_helpers() -> None:
    manifest = Manifest.from_json((DATA / "manifest-v2.json").read_bytes(), source="v2")
    assert manifest.operator("count").parallelism == 2
    assert manifest.operator("nope") is None
    assert manifest.size == 467
    assert manifest.full_size() == 300 + 40 + 120 + 7
    assert manifest.written_size() == 120 + 7


def test_checkpoint_of_path() -> None:
    assert checkpoint_of_path("chk-00000007/x.keyed") == 7
    assert checkpoint_of_path("files/chk-00000003/x.keyed") == 3
    assert checkpoint_of_path("chk-00000009/files/chk-00000003/x.keyed") == 9
    assert checkpoint_of_path("chk-abc/x") is None and checkpoint_of_path("x") is None
