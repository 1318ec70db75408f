"""Driver restarts (issue 21): a supervisor runs the very same command again after the driver
died, and `--from-checkpoint auto` makes that command right every time.

The job file runs under `epochal run ... --from-checkpoint auto` on local Spark, in a process
group of its own; the first run starts fresh, is SIGKILLed (driver, JVM, Python workers) after a
checkpoint committed output, and the same command resumes it: the committed output is exactly
the failure-free output. Run once more after it finished, the command resumes from the final
checkpoint, finds its sources done, writes nothing and exits 0.
"""

from __future__ import annotations

import glob
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest

from epochal.connectors import read_committed
from spark_jobs import JOB_FILE, epochal_cli, expected_updates, wait_until, write_corpus

pytestmark = [pytest.mark.spark, pytest.mark.fault]


def _run_to_end(args: list[str], env: dict[str, str]) -> str:
    """Run `epochal ARGS` to its end; its stderr (it must exit 0)."""
    proc = epochal_cli(args, env)
    _, err = proc.communicate(timeout=300)
    text: str = err.decode()
    assert proc.returncode == 0, text[-3000:]
    return text


def _decision(stderr: str) -> str:
    """The one line in which `auto` said what it decided."""
    lines = [line for line in stderr.splitlines() if "(from_checkpoint='auto')" in line]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _part_files(out: str) -> dict[str, int]:
    return {name: os.path.getsize(os.path.join(out, name)) for name in os.listdir(out) if name.startswith("part-")}


def test_the_same_command_starts_fresh_resumes_after_a_driver_kill_and_reruns_a_finished_job(
    tmp_path: Path,
) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=2, lines=1000)
    expected = expected_updates(corpus)
    env = {**os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt}
    command = ["run", JOB_FILE, "--checkpoint-dir", ckpt, "--from-checkpoint", "auto"]

    # 1. the first start: no checkpoint directory yet, so a fresh start; killed mid-run
    first = epochal_cli(command, env)
    committed = os.path.join(out, "part-*")  # a checkpoint completed and its output was committed
    wait_until(lambda: bool(glob.glob(committed)) or first.poll() is not None, "output was committed", 120)
    assert first.poll() is None, "the job ended before its first commit"
    time.sleep(random.Random(3).uniform(0.1, 0.8))  # the moment of the kill
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker
    _, err = first.communicate()
    assert first.returncode == -signal.SIGKILL, "the run had ended before the kill"
    assert f"no complete checkpoint in {ckpt}: starting fresh" in _decision(err.decode())
    committed_before = len(read_committed(out))
    assert 0 < committed_before < len(expected)

    # 2. the supervisor runs the very same command: it resumes, nothing lost or duplicated
    line = _decision(_run_to_end(command, env))
    resumed = re.search(r"resuming from checkpoint (\d+)", line)
    assert resumed is not None and "final" not in line, line
    assert sorted(map(tuple, read_committed(out))) == expected

    # 3. and once more, after the job finished: its final checkpoint, nothing left to do
    files = _part_files(out)
    line = _decision(_run_to_end(command, env))
    assert re.search(r"resuming from checkpoint \d+, the final one of a run that finished", line), line
    assert int(line.split("checkpoint ")[1].split(",")[0]) > int(resumed.group(1))
    assert _part_files(out) == files  # not a file written, nor one rewritten
    assert sorted(map(tuple, read_committed(out))) == expected
