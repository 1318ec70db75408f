"""The wordcount job file through `epochal run` on a `local-cluster` master: a real standalone
cluster in miniature (a master and workers in the driver's JVM, an executor JVM per worker), so
the job's workers run in executors of their own, not in the driver's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

from epochal.connectors import read_committed
from spark_jobs import JOB_FILE, epochal_cli, expected_updates, write_corpus

pytestmark = [pytest.mark.spark, pytest.mark.fault]


def _applications(work: Path) -> set[Path]:
    """The application directories of standalone workers (an executor's directory in each)."""
    return set(work.glob("app-*"))


def test_the_same_job_passes_on_local_cluster_with_separate_executors(tmp_path: Path) -> None:
    corpus, out, ckpt = str(tmp_path / "corpus"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    write_corpus(corpus, files=2, lines=500)
    env = {
        **os.environ, "EPOCHAL_TEST_CORPUS": corpus, "EPOCHAL_TEST_OUT": out, "EPOCHAL_TEST_CKPT": ckpt,
        "EPOCHAL_TEST_SLOW": "0",
    }
    # local-cluster workers keep each executor's files under $SPARK_HOME/work/<application>/<executor>
    work = Path(_find_spark_home()) / "work"
    before = _applications(work)
    proc = epochal_cli(["run", JOB_FILE, "--master", "local-cluster[2,1,1024]", "--checkpoint-dir", ckpt], env)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert sorted(map(tuple, read_committed(out))) == expected_updates(corpus)
    ours = _applications(work) - before
    assert ours, "no standalone application ran"
    executors = {app: sorted(p.name for p in app.iterdir()) for app in ours}
    assert ["0", "1"] in executors.values(), f"not two executors: {executors}"
    for app in ours:
        shutil.rmtree(app, ignore_errors=True)
