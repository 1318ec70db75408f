"""The supervisor makes a worker's lazy imports before it forks the worker (`supervisor.preload`):
every incarnation inherits them instead of paying them in its first batch."""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHILD = r"""
import sys
from epochal.cluster.supervisor import supervise

def run(incarnation):
    if "pandas" not in sys.modules:
        raise SystemExit("the worker would import pandas in its first batch")

assert "pandas" not in sys.modules
print(supervise(run, max_replacements=0))
"""


def test_a_forked_worker_starts_with_pyarrows_lazy_pandas_import_made() -> None:
    pytest.importorskip("pandas")
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1"
