"""Authenticated checkpoints: with EPOCHAL_CHECKPOINT_KEY set, every manifest carries an HMAC of
its body, and a manifest without a valid one is refused before anything it lists is unpickled.
A checkpoint forged by someone who can write the directory but has no key runs no code."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, CheckpointError, StreamEnvironment
from epochal.errors import CorruptCheckpointError
from epochal.state.manifest import KEY_VARIABLE, Manifest
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource

KEY = "a-long-random-secret-for-tests"


class _Payload:
    """Unpickling it writes a marker file: proof that code from the directory ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def _run(tmp_path: Path, **kwargs: Any) -> Any:
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(directory=str(tmp_path / "ckpt"), **kwargs))
    env.from_source(ListSource(list(range(50)))).key_by(lambda x: x % 3).count().uid("counts").sink_to(CollectSink())
    return env.execute("auth")


def _forge(storage: CheckpointStorage, marker: str) -> int:
    """A newer checkpoint written without the key: a manifest with a correct SHA-256 whose
    operator state is a pickle that runs code."""
    latest = storage.latest()
    assert latest is not None
    evil = pickle.dumps(_Payload(marker))
    forged_id = latest.checkpoint_id + 1
    handle = storage.write_file(forged_id, "evil.op", evil)
    op = latest.operators[0]
    subtask = op.subtasks[0].__class__(0, 0, 128, None, handle)
    forged = Manifest(forged_id, latest.job_name, 0.0, 0.0, (op.__class__(op.uid, 1, 128, (subtask,)),))
    body = json.loads(forged.to_json())["manifest"]  # written as an attacker would: no HMAC
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
    text = json.dumps({"manifest": body, "sha256": hashlib.sha256(payload.encode()).hexdigest()})
    storage.write(f"chk-{forged_id:08d}/MANIFEST.json", text.encode())
    return forged_id


def test_a_forged_checkpoint_is_refused_and_runs_no_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    _run(tmp_path)
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    genuine = storage.latest()
    assert genuine is not None
    assert "hmac" in json.loads((tmp_path / "ckpt" / f"chk-{genuine.checkpoint_id:08d}" / "MANIFEST.json").read_text())
    marker = str(tmp_path / "pwned")
    forged = _forge(storage, marker)
    with pytest.raises(CorruptCheckpointError, match="not authenticated"):
        storage.load_manifest(forged)
    # resuming from "latest" skips the forged one and restores the genuine checkpoint
    env = StreamEnvironment(parallelism=1, executor="inprocess",
                            checkpoint=CheckpointConfig(directory=str(tmp_path / "ckpt")))
    env.from_source(ListSource(list(range(50)))).key_by(lambda x: x % 3).count().uid("counts").sink_to(CollectSink())
    with pytest.raises(CorruptCheckpointError, match="not authenticated"):
        env.execute("auth", from_checkpoint=forged)
    result = env.execute("auth", from_checkpoint="latest")
    assert result.restored_from[0] == genuine.checkpoint_id
    assert not os.path.exists(marker), "a forged pickle was loaded"


def test_without_the_key_the_same_forgery_would_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: what the key prevents (so the test above can fail)."""
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    _run(tmp_path)
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    marker = str(tmp_path / "pwned")
    forged = _forge(storage, marker)
    manifest = storage.load_manifest(forged)
    pickle.loads(storage.read_file(manifest.operators[0].subtasks[0].operator))  # type: ignore[arg-type]
    assert os.path.exists(marker)


def test_a_short_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "short")
    with pytest.raises(CheckpointError, match="at least 16 bytes"):
        _run(tmp_path)
