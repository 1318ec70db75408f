"""FileSink's modes on a fresh start ("error", "overwrite", "append"), a resumed job that keeps
its output whatever the mode, and a target that is not writable, all decided before the job
starts (`FileSink.check`, called once by the job master)."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, EpochalError, JobFailedError, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.testing import ListSource

WORDS = ["to", "be", "or", "not", "to", "be"]
UPDATES = collections.Counter([("to", 1), ("be", 1), ("or", 1), ("not", 1), ("to", 2), ("be", 2)])


def _run(out: Path, mode: str = "error", ckpt: Path | None = None, from_checkpoint: str | None = None) -> Any:
    checkpoint = CheckpointConfig(directory=str(ckpt)) if ckpt is not None else None
    env = StreamEnvironment(parallelism=2, executor="inprocess", checkpoint=checkpoint)
    env.from_source(ListSource(WORDS, splits=2)).key_by(lambda w: w).count().sink_to(FileSink(out, mode=mode))
    return env.execute("modes", from_checkpoint=from_checkpoint)


def _committed(out: Path) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r) for r in read_committed(str(out)))


def _part_files(out: Path) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.startswith("part-"))


def test_the_default_mode_refuses_a_directory_with_committed_output_naming_files_and_modes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(out)
    before = _part_files(out)
    with pytest.raises(EpochalError) as refused:
        _run(out)
    message = str(refused.value)
    assert not isinstance(refused.value, JobFailedError)  # refused before the first attempt
    assert str(out) in message and before[0] in message
    for hint in ('from_checkpoint="latest"', "--from-checkpoint latest", 'mode="overwrite"', 'mode="append"'):
        assert hint in message
    assert _part_files(out) == before and _committed(out) == UPDATES  # nothing touched


def test_a_refusal_names_three_files_and_counts_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for i in range(5):
        (out / f"part-0000{i}-00000001-{i:012x}.jsonl").write_text("[1]\n")
    with pytest.raises(EpochalError, match="and 2 more"):
        _run(out)


def test_overwrite_replaces_only_the_files_a_file_sink_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(out)
    (out / "README.txt").write_text("mine")
    (out / "part-0.csv").write_text("not FileSink's")  # a part-* name FileSink never gives
    (out / "notes").mkdir()
    (out / ".part-00001-0123456789ab.inprogress").write_text('["stale", 1]\n')  # a crashed run's staging
    _run(out, mode="overwrite")
    names = set(os.listdir(out))
    assert {"README.txt", "part-0.csv", "notes"} <= names
    assert ".part-00001-0123456789ab.inprogress" not in names
    own = [n for n in _part_files(out) if n.endswith(".jsonl")]
    lines = [json.loads(line) for n in own for line in (out / n).read_text().splitlines()]
    assert collections.Counter(tuple(r) for r in lines) == UPDATES  # one run's output, not two


def test_overwrite_of_an_empty_or_missing_directory_just_runs(tmp_path: Path) -> None:
    _run(tmp_path / "new" / "out", mode="overwrite")
    assert _committed(tmp_path / "new" / "out") == UPDATES


def test_append_adds_a_second_run_s_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(out)
    _run(out, mode="append")
    assert _committed(out) == UPDATES + UPDATES


def test_a_fresh_start_in_error_mode_drops_staging_files_of_a_crashed_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".part-00000-0123456789ab.inprogress"
    stale.write_text('["never", 1]\n')  # staged, never committed: no checkpoint completed
    _run(out)
    assert not stale.exists()
    assert _committed(out) == UPDATES


def test_a_resumed_job_is_not_refused_whatever_the_mode(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _run(out, ckpt=ckpt)
    before = _part_files(out)
    for mode in ("error", "overwrite", "append"):
        result = _run(out, mode=mode, ckpt=ckpt, from_checkpoint="latest")
        assert result.restored_from[0] is not None
    assert _part_files(out) == before  # resumed at the end: its output stays, nothing is added
    assert _committed(out) == UPDATES


def test_a_target_that_is_not_writable_fails_before_the_job_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy(max_restarts=3))
    env.from_source(ListSource(WORDS)).sink_to(FileSink(blocker / "out"))
    with pytest.raises(EpochalError, match=r"FileSink: cannot write to .*a-file/out") as refused:
        env.execute("unwritable")
    assert not isinstance(refused.value, JobFailedError)  # no attempt, no restart


def test_the_check_leaves_no_probe_file_behind(tmp_path: Path) -> None:
    out = tmp_path / "out"
    FileSink(out).check(resuming=False)
    assert os.listdir(out) == []


@pytest.mark.parametrize("mode", ["errorifexists", "ignore", "", None, 1])
def test_mode_must_be_one_of_the_three(tmp_path: Path, mode: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="mode must be 'error' or 'overwrite' or 'append'"):
        FileSink(tmp_path / "out", mode=mode)
