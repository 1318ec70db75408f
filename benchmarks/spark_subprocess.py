"""Run a benchmark function on local Spark in a fresh process.

A process can create its SparkSession only once, and the benchmarks need `local[2]` for some
parts and `local[4]` for others, so each Spark part runs as `python -c` in a child process: it
starts a session on `master`, ships `benchmarks.workloads` by value to the workers, calls
`module.function(session, **kwargs)` and prints the JSON result on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from .runner import ROOT

_SCRIPT = r"""
import json, sys
sys.path.insert(0, {root!r})
import importlib
from epochal.cluster.spark import create_session
session = create_session({master!r})
from benchmarks import workloads
workloads.ship()
module = importlib.import_module({module!r})
result = getattr(module, {function!r})(session, **json.loads({kwargs!r}))
session.stop()
print("RESULT " + json.dumps(result))
"""


def run_on_spark(master: str, module: str, function: str, timeout: float = 1800, **kwargs: Any) -> Any:
    """`module.function(session, **kwargs)` in a child process on a new session on `master`."""
    script = _SCRIPT.format(root=ROOT, master=master, module=module, function=function, kwargs=json.dumps(kwargs))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"Spark benchmark part failed ({master}, {function}):\n{out.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def settle(most: float = 20.0, busy: float = 0.1, window: float = 0.5) -> float:
    """Wait until this process and its children (the JVM above all) use less than `busy` of a core
    over `window` seconds, at most `most` seconds; returns the seconds waited. A system timed right
    after another on the same session would otherwise share the 2 cores with the JVM still
    compiling and collecting after the previous one (0.3-0.8 CPU-seconds, measured, in a 1.5 s run)."""
    import time

    from .nexmark import cpu_seconds

    started = time.perf_counter()
    before = cpu_seconds() or 0.0
    while time.perf_counter() - started < most:
        time.sleep(window)
        now = cpu_seconds() or 0.0
        if now - before < busy * window:
            break
        before = now
    return time.perf_counter() - started
