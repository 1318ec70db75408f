"""Mistakes found before Spark starts, each in one line and within a second (issue 40): a master
URL that is none, a checkpoint directory that exists but takes no file, `parallelism=0` in the
job file, and a function that does not pickle (it ran in-process, and on Spark failed every
launch, four times, without naming its operator).

Each runs `epochal run` in a fresh interpreter (as a user would), timed from the call of
`main` (not the interpreter's start), and checks that no JVM was started for it. "Within a
second" is asserted on the CPU time the call took (about its wall time on an idle machine; on a
shared, loaded 2-core CI box the wall time can be several times that), the wall time loosely.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

_PROBE = """
import json, sys, time
from epochal.cli.main import main
started, cpu = time.perf_counter(), time.process_time()
code = main(sys.argv[1:])
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
jvm = False
if "pyspark" in sys.modules:
    from pyspark import SparkContext
    jvm = SparkContext._gateway is not None
print(json.dumps({"code": code, "seconds": seconds, "cpu": cpu, "jvm": jvm}))
"""


def _job(tmp_path: Path, body: str, checkpoint: str = "None") -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(f"""
        import threading
        from epochal import CheckpointConfig, StreamEnvironment
        from epochal.connectors import FileSink
        from epochal.testing import ListSource

        checkpoint = {checkpoint}
    """) + textwrap.dedent(body))
    return str(path)


def _epochal_run(*args: str, cwd: Path | None = None) -> tuple[dict[str, object], str]:
    """`epochal run ARGS` in a new interpreter: the probe's findings and stderr."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, "run", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _assert_one_line_at_once(found: dict[str, object], err: str, starts: str) -> str:
    assert found["code"] == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(starts), lines[0]
    assert not found["jvm"], "Spark was started"
    assert float(found["cpu"]) < 1.0 and float(found["seconds"]) < 5.0, found  # type: ignore[arg-type]
    return lines[0]


def test_a_master_url_that_is_none(tmp_path: Path) -> None:
    job = _job(tmp_path, "env = StreamEnvironment(parallelism=1)\n")
    found, err = _epochal_run(job, "--master", "spark//localhost:7077")
    line = _assert_one_line_at_once(found, err, "epochal: bad Spark master URL 'spark//localhost:7077': expected ")
    assert "spark://HOST:PORT" in line and "local[N]" in line


def test_parallelism_zero_in_the_job_file(tmp_path: Path) -> None:
    job = _job(tmp_path, """
        env = StreamEnvironment(parallelism=0)
        env.from_source(ListSource([1, 2, 3])).sink_to(FileSink("out"))
        env.execute("zero")
    """)
    found, err = _epochal_run(job, cwd=tmp_path)
    line = _assert_one_line_at_once(found, err, "epochal: parallelism must be a positive int, got 0")
    assert line.endswith("(job.py, line 9)"), line  # the job file's line that passed it


def test_an_error_of_the_job_file_s_own_code_keeps_its_traceback(tmp_path: Path) -> None:
    job = _job(tmp_path, "raise ValueError('the job file is wrong')\n")
    proc = subprocess.run([sys.executable, "-m", "epochal.cli.main", "run", job], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert proc.stderr.strip().endswith("ValueError: the job file is wrong")


def test_a_function_that_does_not_pickle(tmp_path: Path) -> None:
    job = _job(tmp_path, """
        lock = threading.Lock()

        def guarded(x):
            with lock:
                return x + 1

        env = StreamEnvironment(parallelism=2)
        env.from_source(ListSource([1, 2, 3])).map(guarded, name="guarded").sink_to(FileSink("out"))
        env.execute("unpicklable")
    """)
    found, err = _epochal_run(job, "--executor", "spark", cwd=tmp_path)
    line = _assert_one_line_at_once(found, err, "epochal: operator 'guarded' cannot be sent to Spark's workers: "
                                                "it does not pickle (TypeError: cannot pickle '_thread.lock' object)")
    assert "create that inside the function" in line


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A directory that exists and refuses new files, even to root (immutable) where it can."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(directory)], capture_output=True).returncode != 0:
        pytest.skip("running as root on a filesystem without immutable directories: nothing refuses a write")
    try:
        yield directory
    finally:
        subprocess.run([chattr, "-i", str(directory)], check=True)


def test_an_existing_checkpoint_directory_that_takes_no_file(tmp_path: Path, unwritable: Path) -> None:
    job = _job(tmp_path, """
        env = StreamEnvironment(parallelism=2, checkpoint=checkpoint)
        env.from_source(ListSource([1, 2, 3])).sink_to(FileSink("out"))
        env.execute("unwritable")
    """, checkpoint=f"CheckpointConfig(interval=600, directory={str(unwritable)!r})")
    found, err = _epochal_run(job, "--executor", "spark", cwd=tmp_path)
    line = _assert_one_line_at_once(found, err, f"epochal: checkpoint directory {unwritable} is not writable (")
    assert "--checkpoint-dir" in line
    assert os.listdir(unwritable) == []


@pytest.mark.spark
def test_a_job_its_workers_cannot_load_is_launched_twice_not_four_times(tmp_path: Path) -> None:
    """A failure no relaunch can cure (here: an object that pickles on the driver and cannot be
    loaded on a worker) recurs identically: the second launch's failure ends the job."""
    job = _job(tmp_path, """
        def explode():
            raise RuntimeError("this object cannot be loaded on a worker")

        class Bomb:
            def __reduce__(self):
                return (explode, ())

        bomb = Bomb()
        env = StreamEnvironment(parallelism=2)
        env.from_source(ListSource([1, 2, 3])).map(lambda x: (bomb, x)[1], name="armed").sink_to(FileSink("out"))
        env.execute("cannot-load")
    """)
    proc = subprocess.run([sys.executable, "-m", "epochal.cli.main", "run", job, "--executor", "spark"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("epochal: job 'cannot-load' failed after 2 attempt(s): the Spark stage ended before "
                           "every worker connected: RuntimeError: this object cannot be loaded on a worker"), last
    assert "failed the same way on consecutive attempts" in last
    assert "attempt 0" not in proc.stderr
