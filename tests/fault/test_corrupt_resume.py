"""A resume from a corrupt newest checkpoint commits exactly once, and says it fell back (issue 40).

The scenario a new user met: the driver is killed after the newest checkpoint's manifest was
written and before its output was committed; a byte of that checkpoint's state file flips on
disk; `epochal run --from-checkpoint latest` resumes. Before, one sink subtask committed the
checkpoint's pending output while restoring, another subtask found its state file corrupt, the
job fell back one checkpoint and replayed: the committed epoch came twice, exit status 0. Now
the job master reads every byte of the checkpoint before any task starts, refuses it whole,
restores the one before, and the run ends with status 3 and a summary that says so.

The killed run is in-process (its driver dies at a sink's commit, deterministically); the
resume runs in-process and, in the Spark test, on local Spark, where the tasks restore in
parallel processes (the issue's case).
"""

from __future__ import annotations

import collections
import glob
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from epochal.connectors import read_committed
from epochal.state.storage import CheckpointStorage
from spark_jobs import TESTS, expected_updates, write_corpus

pytestmark = pytest.mark.fault
JOB = os.path.join(TESTS, "jobs", "killed_at_commit_job.py")


def _epochal(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "epochal.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def _killed_run_with_a_corrupt_newest_checkpoint(tmp_path: Path, subtask: int) -> tuple[dict[str, str], int]:
    """Run the job until its driver dies at the commit of its third checkpoint, then flip a byte
    of `subtask`'s keyed state in that checkpoint (its file, or its segment of the merged file);
    the environment and the corrupt id."""
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=2, lines=500)
    env = {**os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt,
           "KILL_AT_COMMIT": "5"}  # two sink subtasks: checkpoints 1 and 2 committed, 3 not
    killed = _epochal(["run", JOB, "--executor", "inprocess"], env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    manifests = sorted(glob.glob(os.path.join(ckpt, "chk-*", "MANIFEST.json")))
    assert len(manifests) >= 2, manifests
    newest = os.path.dirname(manifests[-1])
    assert glob.glob(os.path.join(out, ".*.inprogress")), "the newest checkpoint's output is not pending"
    checkpoint_id = int(os.path.basename(newest)[4:])
    keyed = CheckpointStorage(ckpt, create=False).load_manifest(checkpoint_id).operator("count").subtasks[subtask].keyed
    assert keyed is not None and keyed.path.startswith(os.path.basename(newest))
    state = Path(ckpt) / keyed.path  # a file of its own, or its segment of the merged file
    data = bytearray(state.read_bytes())
    data[(keyed.offset or 0) + keyed.size // 2] ^= 0x01
    state.write_bytes(bytes(data))
    env["KILL_AT_COMMIT"] = "0"
    return env, int(os.path.basename(newest)[4:])


def _assert_exact_and_said(resumed: subprocess.CompletedProcess[str], env: dict[str, str], corrupt: int) -> None:
    expected = collections.Counter(expected_updates(env["EPOCHAL_TEST_CORPUS"]))
    committed = collections.Counter(tuple(r) for r in read_committed(env["EPOCHAL_TEST_OUT"]))
    assert committed == expected, (
        f"{sum((committed - expected).values())} duplicated, {sum((expected - committed).values())} lost")
    assert resumed.returncode == 3, resumed.stderr[-3000:]  # finished, but fell back
    summary = resumed.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"epochal: job 'killed-at-commit' finished: [\d,]+ records in, {sum(expected.values()):,} out \(of which "
        rf"[\d,]+ in and [\d,]+ out since checkpoint {corrupt - 1}\), \d+ checkpoints?, 0 restarts; checkpoint\(s\) "
        rf"{corrupt} refused as corrupt \(checkpoint {corrupt}: chk-\d+/[\w.@-]+: checksum mismatch "
        rf"\(corrupt or truncated\)\), restored from checkpoint {corrupt - 1} instead: their epochs were replayed",
        summary), summary
    # the job file's own summary counts the whole job: every update, not those since the checkpoint
    assert resumed.stdout.strip() == f"killed-at-commit: {sum(expected.values()):,} updates committed"


@pytest.mark.parametrize("subtask", [0, 1])
def test_a_corrupt_newest_checkpoint_is_refused_before_any_output_is_committed(tmp_path: Path, subtask: int) -> None:
    env, corrupt = _killed_run_with_a_corrupt_newest_checkpoint(tmp_path, subtask)
    resumed = _epochal(["run", JOB, "--executor", "inprocess", "--from-checkpoint", "latest"], env)
    _assert_exact_and_said(resumed, env, corrupt)


def test_a_corrupt_checkpoint_named_by_id_is_refused_in_one_line(tmp_path: Path) -> None:
    env, corrupt = _killed_run_with_a_corrupt_newest_checkpoint(tmp_path, 0)
    refused = _epochal(["run", JOB, "--executor", "inprocess", "--from-checkpoint", str(corrupt)], env)
    assert refused.returncode == 1
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert line.startswith(f"epochal: checkpoint {corrupt}: chk-") and "checksum mismatch" in line
    assert f"checkpoint {corrupt} cannot be restored: start from an older one" in line


@pytest.mark.spark
def test_on_spark_a_corrupt_newest_checkpoint_is_refused_before_any_output_is_committed(tmp_path: Path) -> None:
    env, corrupt = _killed_run_with_a_corrupt_newest_checkpoint(tmp_path, 1)
    resumed = _epochal(["run", JOB, "--executor", "spark", "--from-checkpoint", "latest"], env)
    _assert_exact_and_said(resumed, env, corrupt)
