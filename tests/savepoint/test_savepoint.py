"""Savepoints: a self-contained copy of a complete checkpoint, outside the checkpoint directory,
that retention never touches and that a changed job starts from (operators matched by uid)."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.cli.main import main
from epochal.errors import CheckpointError
from epochal.state.reader import read_state
from epochal.state.savepoints import create_savepoint, load_savepoint
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, ListSource


def _env(directory, parallelism=2, backend="memory"):
    return StreamEnvironment(
        parallelism=parallelism,
        checkpoint=CheckpointConfig(interval=0.002, directory=directory, retain=1),
        executor="inprocess",
        restart=RestartStrategy.none(),
        state_backend=backend,
    )


def _counts_job(env, items, *, uid="counts", source="src", extra=False):
    keyed = env.from_source(ListSource(items, splits=2, batch_size=5), name=source).key_by(lambda r: r[0])
    keyed.count().uid(uid).sink_to(CollectSink(), name=f"out-{source}")
    if extra:  # a changed job: an operator that did not exist before starts empty
        keyed.reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sums").sink_to(CollectSink(), name=f"sums-{source}")


ITEMS = [(f"k{i % 17}", i) for i in range(400)]


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_a_changed_job_at_another_parallelism_starts_from_a_savepoint(tmp_path, backend):
    first = str(tmp_path / "first")
    env = _env(first, backend=backend)
    _counts_job(env, ITEMS)
    env.execute("first")
    savepoint = str(tmp_path / "mine" / "sp-1")
    assert main(["savepoint", first, savepoint]) == 0
    shutil.rmtree(first)  # the savepoint needs nothing from the checkpoint directory

    env = _env(str(tmp_path / "second"), parallelism=3, backend=backend)
    _counts_job(env, ITEMS[:17], source="src2", extra=True)
    result = env.execute("second", from_checkpoint=savepoint, allow_non_restored_state=True)
    assert result.restored_from[0] is not None
    counts = {r.key: r.value for r in read_state(str(tmp_path / "second"), "counts")}
    assert counts == {f"k{k}": 400 // 17 + (1 if k < 400 % 17 else 0) + 1 for k in range(17)}
    assert {r.key for r in read_state(str(tmp_path / "second"), "sums")} == {f"k{k}" for k in range(17)}
    # the savepoint is untouched by the second job's retention, and still verifies
    assert read_state(savepoint, "counts")


def test_state_of_an_operator_the_job_lacks_is_an_error_unless_allowed(tmp_path):
    directory = str(tmp_path / "ckpt")
    env = _env(directory)
    _counts_job(env, ITEMS)
    env.execute("first")
    savepoint = str(tmp_path / "sp")
    create_savepoint(CheckpointStorage(directory), "latest", savepoint)
    env = _env(str(tmp_path / "other"))
    _counts_job(env, ITEMS, uid="renamed")
    with pytest.raises(CheckpointError, match=r"\['counts'\]"):
        env.execute("second", from_checkpoint=savepoint)


def test_uid_names_state_in_checkpoints_savepoints_and_the_reader(tmp_path):
    directory = str(tmp_path / "ckpt")
    env = _env(directory)
    _counts_job(env, ITEMS, uid="my-counts")
    env.execute("first")
    manifest = CheckpointStorage(directory).resolve("latest")
    assert "my-counts" in {op.uid for op in manifest.operators}
    assert any(st.keyed is not None for st in manifest.operator("my-counts").subtasks)  # its state, by uid
    savepoint = str(tmp_path / "sp")
    assert create_savepoint(CheckpointStorage(directory), "latest", savepoint).operator("my-counts")
    assert len(read_state(savepoint, "my-counts")) == 17
    # the uid, not the operator's position or name, finds the state in a rebuilt job
    env = _env(str(tmp_path / "re"))
    env.from_source(ListSource([("k0", 0)]), name="fresh").map(lambda r: r).key_by(lambda r: r[0]).count().uid(
        "my-counts"
    ).sink_to(CollectSink(), name="o")
    env.execute("again", from_checkpoint=savepoint, allow_non_restored_state=True)
    assert {r.key: r.value for r in read_state(str(tmp_path / "re"), "my-counts")}["k0"] == 400 // 17 + 2


def test_savepoint_into_a_non_empty_directory_is_refused(tmp_path, capsys):
    directory = str(tmp_path / "ckpt")
    env = _env(directory)
    _counts_job(env, ITEMS)
    env.execute("first")
    target = tmp_path / "full"
    target.mkdir()
    (target / "x").write_text("mine")
    assert main(["savepoint", directory, str(target)]) == 1
    assert "not empty" in capsys.readouterr().err


def test_a_corrupt_savepoint_is_refused(tmp_path):
    from epochal.errors import CorruptCheckpointError

    directory = str(tmp_path / "ckpt")
    env = _env(directory)
    _counts_job(env, ITEMS)
    env.execute("first")
    savepoint = str(tmp_path / "sp")
    manifest = create_savepoint(CheckpointStorage(directory), "latest", savepoint)
    handle = next(st.keyed for st in manifest.operator("counts").subtasks if st.keyed is not None)
    with open(os.path.join(savepoint, handle.path), "r+b") as f:
        f.seek((handle.offset or 0) + 10)  # within the keyed state's segment of the merged file
        f.write(b"\xff\xff")
    # the size is right, so it resolves; its bytes are verified as the job copies it in
    assert load_savepoint(savepoint) == manifest
    env = _env(str(tmp_path / "other"))
    _counts_job(env, ITEMS)
    with pytest.raises(CorruptCheckpointError, match=rf"{re.escape(handle.path)}: checksum mismatch"):
        env.execute("second", from_checkpoint=savepoint)
