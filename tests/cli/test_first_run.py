"""The first run, and the second (issue 21): `epochal run` twice does not write everything twice,
it says how to resume or start over, in one line; mistakes that cannot run (a missing input, an
unreachable master) fail in seconds, before Spark starts; Spark's start-up stays quiet."""

from __future__ import annotations

import collections
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from epochal.cli.main import main
from epochal.cluster.session import SPARK_LOG_ENV
from epochal.connectors import read_committed
from epochal.state.storage import CheckpointStorage

REPO = Path(__file__).resolve().parents[2]
EXPECTED = collections.Counter((f"k{k}", n) for k in range(5) for n in range(1, 41))


def _job_file(tmp_path: Path, checkpoint: bool = True, source: str = "") -> str:
    path = tmp_path / "job.py"
    ckpt = str(tmp_path / "ckpt")
    checkpoint_config = f"CheckpointConfig(interval=0.05, directory={ckpt!r})" if checkpoint else "None"
    source = source or 'ListSource([f"k{i % 5}" for i in range(200)], splits=2)'
    path.write_text(textwrap.dedent(f"""
        from epochal import StreamEnvironment, CheckpointConfig
        from epochal.connectors import FileSink, TextFileSource
        from epochal.testing import ListSource

        env = StreamEnvironment(parallelism=2, checkpoint={checkpoint_config})
        (env.from_source({source})
            .key_by(lambda k: k).count().sink_to(FileSink({str(tmp_path / "out")!r})))
        if __name__ == "__main__":
            env.execute("first-run")
    """))
    return str(path)


def _committed(directory: Path) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r) for r in read_committed(str(directory)))


def test_a_second_run_is_refused_in_one_line_and_the_first_run_resumes(tmp_path: Path, capsys: Any) -> None:
    job = _job_file(tmp_path)
    assert main(["run", job, "--executor", "inprocess"]) == 0
    assert _committed(tmp_path / "out") == EXPECTED
    capsys.readouterr()

    assert main(["run", job, "--executor", "inprocess"]) == 1
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("epochal: ")]
    assert len(line) == 1 and "already holds complete checkpoints" in line[0]
    assert "--from-checkpoint latest" in line[0] and 'existing="overwrite"' in line[0]
    assert "Traceback" not in err
    assert _committed(tmp_path / "out") == EXPECTED  # nothing written twice

    assert main(["run", job, "--executor", "inprocess", "--from-checkpoint", "latest"]) == 0
    assert _committed(tmp_path / "out") == EXPECTED


def test_a_second_run_over_committed_output_is_refused_naming_the_sink_s_modes(tmp_path: Path, capsys: Any) -> None:
    job = _job_file(tmp_path, checkpoint=False)
    assert main(["run", job, "--executor", "inprocess"]) == 0
    capsys.readouterr()
    assert main(["run", job, "--executor", "inprocess"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"epochal: FileSink: {tmp_path / 'out'} already holds output (part-")
    assert 'mode="overwrite"' in err and 'mode="append"' in err and len(err.splitlines()) == 1
    assert _committed(tmp_path / "out") == EXPECTED


def test_the_demo_run_twice_holds_one_run_s_output(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python examples/wordcount.py`, then `epochal run examples/wordcount.py` (in-process here):
    the demo starts over each time (existing="overwrite", mode="overwrite")."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    demo = str(REPO / "examples" / "wordcount.py")
    for _ in range(2):
        assert main(["run", demo, "--executor", "inprocess"]) == 0
        assert capsys.readouterr().out.startswith("wordcount: 96,000 updates committed")
    assert sum(_committed(tmp_path / "out").values()) == 96_000
    # the checkpoints are the second run's only: ids started again at 1
    assert CheckpointStorage("ckpt", create=False).checkpoint_ids()[0] == 1


def _epochal(*args: str, cwd: Path, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    """`epochal ARGS` in a new Python process; also reports whether it imported pyspark."""
    probe = (
        "import sys; from epochal.cli.main import main; code = main(sys.argv[1:]); "
        "print('pyspark imported:', 'pyspark' in sys.modules); sys.exit(code)"
    )
    env = {k: v for k, v in os.environ.items() if k != SPARK_LOG_ENV}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return done, time.monotonic() - started


def test_a_missing_input_fails_on_the_driver_before_spark_starts(tmp_path: Path) -> None:
    job = _job_file(tmp_path, source=f"TextFileSource({str(tmp_path / 'corpus')!r})")  # executor: spark
    done, seconds = _epochal("run", job, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == f"epochal: TextFileSource: no such file or directory: {tmp_path / 'corpus'}\n"
    assert "pyspark imported: False" in done.stdout  # no session, no stage, no restart
    assert seconds < 10


def test_an_unreachable_master_fails_within_seconds_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once released
    master = f"spark://127.0.0.1:{port}"
    done, seconds = _epochal("run", "--master", master, _job_file(tmp_path), cwd=tmp_path)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"epochal: cannot reach the Spark master {master} (")
    assert seconds < 15
    assert not (tmp_path / "out").exists()  # the job file never ran


def test_verbose_asks_for_spark_s_log_and_epochal_s_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SPARK_LOG_ENV, "")  # recorded, so the WARN that `run` sets is undone afterwards
    monkeypatch.delenv(SPARK_LOG_ENV)  # (a delenv of an unset variable alone would not undo it)
    logger, root = logging.getLogger("epochal"), logging.getLogger()
    level, handlers = logger.level, list(root.handlers)
    try:
        assert main(["run", _job_file(tmp_path), "--executor", "inprocess", "--verbose"]) == 0
        assert os.environ[SPARK_LOG_ENV] == "WARN"
        assert logger.getEffectiveLevel() == logging.INFO
    finally:
        logger.setLevel(level)
        root.handlers[:] = handlers
    assert "attempt 1 starts fresh" in caplog.text


@pytest.mark.spark
def test_a_run_on_local_spark_prints_no_jvm_start_up_lines(tmp_path: Path) -> None:
    job = _job_file(tmp_path)
    done, _ = _epochal("run", job, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    noise = ("WARN", "log4j", "NativeCodeLoader", "incubator", "Setting default log level", "setLogLevel")
    assert [line for line in done.stderr.splitlines() if any(n in line for n in noise)] == []
    assert _committed(tmp_path / "out") == EXPECTED

    done, seconds = _epochal("run", job, cwd=tmp_path)  # refused on the driver, before Spark
    assert done.returncode == 1 and "already holds complete checkpoints" in done.stderr
    assert "pyspark imported: False" in done.stdout and seconds < 10
