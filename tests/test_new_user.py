"""A new user's first hour, scripted (issue 40): a fresh virtualenv, the README's quick start as
printed (install, then the demo), then the README's command-line tour, each line as printed.

The working tree (what `git ls-files` holds, plus new files not ignored) is copied into a new
directory, as a fresh clone would be, so nothing is written into the repository; the new
virtualenv's `python` and `epochal` come first on the PATH, as after `source .venv/bin/activate`.
It installs pyspark and friends into the new environment (pip's cache makes that a minute or two
here): it runs in CI's full run (marked `spark`, as it starts Spark), not in the quick lane.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "docs"))
from doc_blocks import command_blocks  # noqa: E402

pytestmark = pytest.mark.spark


def _quick_start() -> str:
    """The quick start's first command (install and demo), as the README prints it."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    first = next(line for line in block.splitlines() if line.strip())
    return first.split("  #", 1)[0].strip()


def _fresh_clone(target: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _shell(line: str, cwd: Path, env: dict[str, str], timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"`{line}`: status {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_quick_start_and_the_command_line_tour_work_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    clone, venv = tmp_path / "epochal", tmp_path / "venv"
    _fresh_clone(clone)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv))

    quick_start = _quick_start()
    assert quick_start == "python -m pip install . && python examples/wordcount.py", quick_start
    demo = _shell(quick_start, clone, env)
    assert re.search(r"^wordcount: 96,000 updates committed to out/, \d+ checkpoint\(s\), 0 restart\(s\)$",
                     demo.stdout, re.MULTILINE), demo.stdout[-2000:]
    assert (venv / "bin" / "epochal").exists()

    (tour,) = command_blocks("README.md")
    said = {line: _shell(line, clone, env) for line in tour.lines}
    version = said["epochal --version"].stdout.strip()
    assert re.fullmatch(r"epochal \d+\.\d+\.\d+", version), version
    summary = said["epochal run examples/wordcount.py"].stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"epochal: job 'wordcount' finished: 8,000 records in, 96,000 out, \d+ checkpoints?, "
                        r"0 restarts", summary), summary
    history = said["epochal history ckpt-custom-source"].stdout
    assert "attempt 1 failed" in history and "CRASH_ONCE: failing once" in history, history
    assert "200,000 records in" in history, history  # the whole job, across its restart
