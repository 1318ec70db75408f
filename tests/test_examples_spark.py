"""The example that needs Spark itself (`examples/read_state_with_spark.py`: a job's keyed state
read as a DataFrame) runs twice in a row as a user runs it, `python examples/...`, in its own
process (it makes and stops its own local session), to the same result (issue 40: every example
runs twice)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
pytestmark = pytest.mark.spark


def test_read_state_with_spark_runs_twice_in_a_row(tmp_path: Path) -> None:
    lines = []
    for run in range(2):
        done = subprocess.run([sys.executable, str(EXAMPLES / "read_state_with_spark.py")], cwd=tmp_path,
                              capture_output=True, text=True, timeout=900, env={**os.environ})
        assert done.returncode == 0, f"run {run + 1}: {done.stderr[-3000:]}"
        out = done.stdout.strip().splitlines()
        assert len(out) == 1, out
        lines.append(out[0])
    assert re.match(r"read_state_with_spark: 9 keys, top \[\('the', 600\), ", lines[1]), lines[1]
    # the same keys and top words (the checkpoints it passed through depend on timing)
    assert lines[0].split(", words counted")[0] == lines[1].split(", words counted")[0]
