"""`epochal run` prints how to reach the job; `epochal status` and `epochal cancel` use it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epochal.cli.main import main
from epochal.cluster.endpoint import call
from epochal.state.storage import CheckpointStorage

JOB = '''
import time
from epochal import Source, SplitReader, StreamEnvironment
from epochal.testing import CollectSink

class Split:
    split_id = "endless"

class Reader(SplitReader):
    def __init__(self, position):
        self.next = position or 0
    def read(self, max_records):
        time.sleep(0.002)
        self.next += 1
        return [self.next]
    def position(self):
        return self.next

class Endless(Source):
    def splits(self):
        return [Split()]
    def open_split(self, split, position):
        return Reader(position)

env = StreamEnvironment(parallelism=1, executor="inprocess")
env.from_source(Endless()).sink_to(CollectSink())
env.execute("endless-cli")
'''


def _address(process: subprocess.Popen[str]) -> tuple[str, str]:
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"at (http://127\.0\.0\.1:\d+) \(token for actions: (\S+)\)", line)
        if found:
            return found.group(1), found.group(2)
    raise AssertionError("the job never printed its endpoint")


def test_status_then_cancel_a_job_started_with_epochal_run(tmp_path: Path, capsys: object) -> None:
    job = tmp_path / "endless.py"
    job.write_text(JOB)
    process = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url, token = _address(process)
        deadline = time.monotonic() + 30
        while call(url, "/status")[1]["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert main(["status", url]) == 0
        assert main(["cancel", url, "--token", "not-the-token"]) == 1
        assert process.poll() is None  # refused: still running
        assert main(["cancel", url, "--token", token]) == 0
        assert process.wait(timeout=30) == 1  # `epochal run` reports the cancel
    finally:
        process.kill()
    out, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert "job 'endless-cli': running, parallelism 1, attempt 1" in out
    assert "epochal: the job refused the token" in err
    assert "cancel requested" in out


def test_status_of_nothing_is_one_line(capsys: object) -> None:
    assert main(["status", "http://127.0.0.1:9"]) == 1
    _, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert err.startswith("epochal: cannot reach a job at http://127.0.0.1:9") and err.count("\n") == 1


def test_cancel_without_a_token_says_where_to_find_it(capsys: object, monkeypatch: object) -> None:
    monkeypatch.delenv("EPOCHAL_TOKEN", raising=False)  # type: ignore[attr-defined]
    assert main(["cancel", "http://127.0.0.1:9"]) == 1
    _, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert "--token TOKEN or EPOCHAL_TOKEN" in err


def test_rescale_and_savepoint_a_job_started_with_epochal_run(tmp_path: Path, capsys: object) -> None:
    job = tmp_path / "endless.py"
    checkpoints = f"CheckpointConfig(interval=0.1, directory={str(tmp_path / 'c')!r})"
    job.write_text(JOB.replace('executor="inprocess")', f'executor="inprocess", checkpoint={checkpoints})')
                   .replace("from epochal import", "from epochal import CheckpointConfig,"))
    process = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url, token = _address(process)
        assert main(["rescale", url, "2", "--token", token]) == 0
        assert call(url, "/status")[1]["parallelism"] == 2
        assert main(["savepoint", url, str(tmp_path / "sp"), "--token", token]) == 0
        assert (tmp_path / "sp" / "MANIFEST.json").exists()
        with pytest.raises(SystemExit):  # argparse: not a positive integer
            main(["rescale", url, "0", "--token", token])
        assert main(["cancel", url, "--token", token]) == 0
        process.wait(timeout=30)
    finally:
        process.kill()
    out, _ = capsys.readouterr()  # type: ignore[attr-defined]
    assert "rescaled to 2 at checkpoint" in out and "savepoint of the running job written to" in out


def test_move_key_groups_of_a_job_started_with_epochal_run(tmp_path: Path, capsys: object) -> None:
    job = tmp_path / "keyed.py"
    checkpoints = f"CheckpointConfig(interval=0.1, directory={str(tmp_path / 'c')!r})"
    job.write_text(JOB.replace('parallelism=1, executor="inprocess")',
                               f'parallelism=2, executor="inprocess", checkpoint={checkpoints})')
                   .replace(".sink_to(CollectSink())", ".key_by(lambda x: x % 10).count().sink_to(CollectSink())")
                   .replace("from epochal import", "from epochal import CheckpointConfig,"))
    process = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url, token = _address(process)
        assert main(["move", url, "0-31", "1", "--batch", "8", "--token", token]) == 0
        assert main(["move", url, "0-31", "7", "--token", token]) == 1  # no subtask 7: refused, runs on
        assert call(url, "/status")[1]["state"] == "running"
        assert main(["cancel", url, "--token", token]) == 0
        process.wait(timeout=30)
    finally:
        process.kill()
    out, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert "key groups 0-31 moved to subtask 1 (last at checkpoint" in out
    assert "out of range" in err
    manifest = CheckpointStorage(str(tmp_path / "c")).resolve("latest")
    assert manifest.routing is not None and manifest.routing.version == 4  # four steps of 8
    assert manifest.routing.owners[:32] == (1,) * 32


def test_patch_a_job_started_with_epochal_run(tmp_path: Path, capsys: object) -> None:
    """`epochal patch URL UID fix.py:new`: the committed files of checkpoints up to the one it
    answers hold the old function's output, the later ones the new one's."""
    import json

    job = tmp_path / "tagged.py"
    out = tmp_path / "out"
    checkpoints = f"CheckpointConfig(interval=0.1, directory={str(tmp_path / 'c')!r})"
    tagged = f'.map(lambda x: (x, "old"), name="tag").sink_to(FileSink({str(out)!r}))'
    imports = "from epochal.connectors import FileSink\nfrom epochal import CheckpointConfig,"
    job.write_text(JOB.replace('executor="inprocess")', f'executor="inprocess", checkpoint={checkpoints})')
                   .replace(".sink_to(CollectSink())", tagged).replace("from epochal import", imports))
    fix = tmp_path / "fix.py"
    fix.write_text("def new(x):\n    return (x, 'new')\n")
    process = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url, token = _address(process)
        assert main(["patch", url, "tag", f"{fix}:missing", "--token", token]) == 1  # refused where it is asked
        assert main(["patch", url, "tag", f"{fix}:new", "--token", token]) == 0
        time.sleep(0.5)  # the new function's output, committed by later checkpoints
        assert main(["cancel", url, "--token", token]) == 0
        process.wait(timeout=30)
    finally:
        process.kill()
    printed, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert "has no 'missing'" in err
    at = int(re.search(r"tag runs .*fix\.py:new from checkpoint (\d+) on", printed).group(1))  # type: ignore[union-attr]
    tags: dict[str, set[str]] = {"before": set(), "after": set()}
    for name in os.listdir(out):
        if name.startswith("part-") and not name.endswith(".inprogress"):
            checkpoint = int(name.split("-")[2])
            with open(out / name) as f:
                tags["before" if checkpoint <= at else "after"].update(json.loads(line)[1] for line in f)
    assert tags == {"before": {"old"}, "after": {"new"}}


def test_resize_a_job_started_with_epochal_run(tmp_path: Path, capsys: object) -> None:
    """`epochal resize URL UID N`: answered once the pools run N processes; an operator without a
    pool is refused with why."""
    job = tmp_path / "pooled.py"
    job.write_text(JOB.replace(".sink_to(CollectSink())", '.map(abs, name="work", processes=1).sink_to(CollectSink())'))
    process = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", str(job)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url, token = _address(process)
        assert main(["resize", url, "work", "2", "--token", token]) == 0
        assert main(["resize", url, "nope", "2", "--token", token]) == 1
        assert main(["cancel", url, "--token", token]) == 0
        process.wait(timeout=30)
    finally:
        process.kill()
    printed, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert "work runs 2 processes per subtask" in printed
    assert "no operator with uid 'nope'" in err
