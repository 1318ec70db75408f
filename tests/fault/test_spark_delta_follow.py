"""A Delta table followed on Spark (`DeltaSource(follow=True)` -> `DeltaSink`), versions committed
all along; the output table, read back with deltalake, holds every row exactly once.

- A worker SIGKILLed: versions committed before, during and after are each read once (the job
  master's enumerator hands out each version's files; the restored attempt is sent the split
  log again and resumes each file at its row).
- The driver (its JVM and Python workers with it) SIGKILLed, versions committed while it is
  down, and the same command run again (`epochal run JOB.py --from-checkpoint auto`): it resumes
  at the versions of its checkpoint, not at the table's newest (whose snapshot holds rows the
  first run read), reads every version after them and commits what the checkpoint had pending.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment
from epochal.cluster.spark import SparkExecutor
from epochal.connectors import DeltaSink, DeltaSource
from epochal.runtime.master.control import JobControl
from spark_jobs import TESTS, epochal_cli, run_in_background, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.fault]
deltalake = pytest.importorskip("deltalake")


def _append(path: str, start: int, n: int) -> None:
    ids = list(range(start, start + n))
    deltalake.write_deltalake(path, pa.table({"id": ids, "region": [f"r{i % 3}" for i in ids]}),
                              partition_by=["region"], mode="append")


def _out(path: str) -> list[int]:
    if not deltalake.DeltaTable.is_deltatable(path):
        return []
    return sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def test_versions_committed_around_a_sigkill_are_read_exactly_once(spark: Any, tmp_path: Path) -> None:
    src, dst = str(tmp_path / "in"), str(tmp_path / "out")
    _append(src, 0, 500)

    def _slow(row: tuple[Any, ...]) -> tuple[int, str]:  # a closure: Spark's workers get it by value
        import time

        time.sleep(0.001)
        return (row[0], row[1])

    env = StreamEnvironment(
        parallelism=2, executor="spark", spark=spark,
        checkpoint=CheckpointConfig(interval=0.3, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=3), batch_size=32,
    )
    schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    (env.from_source(DeltaSource(src, follow=True, poll_interval=0.1)).map(_slow)
        .sink_to(DeltaSink(dst, schema=schema)))
    job = env.job_graph("delta-follow-kill")
    executor, control = SparkExecutor(spark), JobControl(job.name, 2)
    thread, outcome = run_in_background(executor, job, control)
    try:
        wait_until(lambda: len(executor.worker_pids) == 2, "both workers said hello")
        _append(src, 500, 400)
        wait_until(lambda: (control.status().last_checkpoint or 0) >= 2, "two checkpoints completed")
        _append(src, 900, 400)
        os.kill(sorted(executor.worker_pids.values())[1], signal.SIGKILL)
        _append(src, 1300, 400)  # while the stage is relaunched
        wait_until(lambda: control.status().restarts == 1, "the job restarted")
        _append(src, 1700, 300)
        wait_until(lambda: len(_out(dst)) >= 2000 or not thread.is_alive(), "every version is in the output", 240)
    finally:
        control.request_cancel()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), JobCancelledError), outcome
    assert _out(dst) == list(range(2000))


class _Appender:
    """Commits a version of `batch` rows to the input table every `every` seconds, in a thread."""

    def __init__(self, path: str, start: int, batch: int = 40, every: float = 0.15) -> None:
        self.path, self.next, self.batch, self.every = path, start, batch, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            _append(self.path, self.next, self.batch)
            self.next += self.batch

    def __enter__(self) -> _Appender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _endpoint(proc: subprocess.Popen[bytes], lines: list[str]) -> tuple[str, str]:
    """Read the run's stderr (into `lines`, in a thread) until it printed its control endpoint."""
    found: list[tuple[str, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            lines.append(raw.decode(errors="replace"))
            if not found and (m := re.search(r"at (http://127\.0\.0\.1:\d+) \(token for actions: (\S+)\)", lines[-1])):
                found.append((m.group(1), m.group(2)))

    threading.Thread(target=read, daemon=True).start()
    wait_until(lambda: bool(found) or proc.poll() is not None, "the job printed its endpoint", 180)
    assert found, "".join(lines)[-3000:]
    return found[0]


def test_a_killed_driver_resumes_with_the_same_command_and_reads_every_version_once(tmp_path: Path) -> None:
    src, dst, ckpt = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    _append(src, 0, 300)
    env = {**os.environ, "EPOCHAL_TEST_DELTA_IN": src, "EPOCHAL_TEST_DELTA_OUT": dst, "EPOCHAL_TEST_CKPT": ckpt}
    command = ["run", os.path.join(TESTS, "jobs", "delta_follow_job.py"),
               "--checkpoint-dir", ckpt, "--from-checkpoint", "auto"]

    first, first_err = epochal_cli(command, env), []  # type: ignore[var-annotated]
    _endpoint(first, first_err)
    with _Appender(src, 300) as appender:  # versions committed while the first run reads
        wait_until(lambda: len(_out(dst)) >= 400 or first.poll() is not None, "rows were committed", 180)
        assert first.poll() is None, "".join(first_err)[-3000:]
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker
        first.wait()
        time.sleep(0.5)  # versions committed while no driver runs
    committed = _out(dst)
    assert 0 < len(committed) < appender.next and committed == sorted(set(committed))
    assert "no complete checkpoint" in "".join(first_err)

    again, again_err = epochal_cli(command, env), []  # type: ignore[var-annotated]
    try:
        url, token = _endpoint(again, again_err)
        with _Appender(src, appender.next, every=0.3) as later:  # and while the second run reads
            time.sleep(2.0)
        wait_until(lambda: len(_out(dst)) >= later.next or again.poll() is not None, "every version is in the output",
                   240)
        time.sleep(1.0)  # a duplicate would have a moment to be committed
        assert again.poll() is None, "".join(again_err)[-3000:]
        request = urllib.request.Request(url + "/cancel", method="POST", data=b"",
                                         headers={"Authorization": f"Bearer {token}"})
        urllib.request.urlopen(request, timeout=30).read()
        again.wait(timeout=120)
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)
            again.wait()
    assert re.search(r"resuming from checkpoint \d+", "".join(again_err)), "".join(again_err)[-3000:]
    assert _out(dst) == list(range(later.next))
