"""How `epochal run` ends (issue 40): the last progress report is the job's final state (not the
report a second before the end, still "running"), and the last line is the job's summary, whose
counts are the whole job's."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

RECORDS = 3_000


def _job_file(tmp_path: Path) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(f"""
        import time
        from epochal import StreamEnvironment, CheckpointConfig
        from epochal.connectors import FileSink
        from epochal.testing import ListSource

        def slow(x):
            time.sleep(0.0003)
            return x

        env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.3))
        (env.from_source(ListSource(list(range({RECORDS})), splits=2)).map(slow)
            .key_by(lambda x: x % 7).count().sink_to(FileSink({str(tmp_path / "out")!r})))
        if __name__ == "__main__":
            env.execute("run-end")
    """))
    return str(path)


def _run(tmp_path: Path, executor: str) -> list[str]:
    command = [sys.executable, "-m", "epochal.cli.main", "run", _job_file(tmp_path), "--executor", executor]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr.strip().splitlines()


def _check_the_end(lines: list[str]) -> None:
    progress = [line for line in lines if line.startswith("records in ")]
    assert progress, lines
    assert progress[-1].startswith(f"records in {RECORDS:,} ") and f"out {RECORDS:,}  " in progress[-1], progress[-1]
    assert progress[-1].endswith("  (finished)"), progress[-1]
    assert not any(line.endswith("(finished)") for line in progress[:-1])
    assert re.fullmatch(rf"epochal: job 'run-end' finished: {RECORDS:,} records in, {RECORDS:,} out, "
                        r"\d+ checkpoints?, 0 restarts", lines[-1]), lines[-1]


def test_in_process_the_last_report_is_the_end_and_the_summary_follows(tmp_path: Path) -> None:
    _check_the_end(_run(tmp_path, "inprocess"))


@pytest.mark.spark
def test_on_spark_the_last_report_is_the_end_and_the_summary_follows(tmp_path: Path) -> None:
    _check_the_end(_run(tmp_path, "spark"))
