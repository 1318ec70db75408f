"""`epochal serve` and `epochal run --service` (issue 40): job files run on one long-lived
SparkSession, as `epochal run` runs them (output, summary, exit status), one at a time.

The service runs in this process on the tests' session (`JobService`, what `epochal serve`
starts); clients are real `epochal run --service` processes. One test starts the command itself.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochal.cli.service import JobService
from epochal.connectors import read_committed

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def service(spark: Any) -> Iterator[JobService]:
    running = JobService(spark)
    yield running
    running.close()


def _job(directory: Path, records: int = 2_000, body: str = "", pause: float = 0.0) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "helper.py").write_text("SUFFIX = 'first'\n")
    path = directory / "job.py"
    path.write_text(textwrap.dedent(f"""
        import sys
        import time
        import helper
        from epochal import StreamEnvironment, CheckpointConfig
        from epochal.connectors import FileSink
        from epochal.testing import ListSource

        def pause(k):
            time.sleep({pause!r})
            return k

        env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.3, directory="ckpt",
                                                                           existing="overwrite"))
        (env.from_source(ListSource([f"k{{i % 5}}" for i in range({records})], splits=2)).map(pause)
            .key_by(lambda k: k).count().sink_to(FileSink("out", mode="overwrite")))
        {body}
        if __name__ == "__main__":
            result = env.execute("served")
            print(f"served: {{result.records_out:,}} updates, args {{sys.argv[1:]}}, helper {{helper.SUFFIX}}")
    """))
    return str(path)


def _client(service: JobService, job: str, *args: str, cwd: Path, token: str | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "epochal.cli.main", "run", job, "--service", service.url,
               "--service-token", token or service.token, *args]
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_job_file_runs_on_the_service_as_epochal_run_runs_it(service: JobService, tmp_path: Path) -> None:
    job = _job(tmp_path / "a")
    for run in ("first", "second"):  # rerunnable, and the second is warm
        done = _client(service, job, "--", "x", "y", cwd=tmp_path / "a")
        out, err = done.communicate(timeout=300)
        assert done.returncode == 0, err
        assert out.strip() == "served: 2,000 updates, args ['x', 'y'], helper first", (run, out)
        assert err.strip().splitlines()[-1] == ("epochal: job 'served' finished: 2,000 records in, 2,000 out, "
                                                + err.strip().splitlines()[-1].split(" out, ")[1])
        assert re.search(r"records in 2,000 .*\(finished\)", err), err  # the progress, drawn by the client
    committed = collections.Counter(tuple(r) for r in read_committed(str(tmp_path / "a" / "out")))
    assert committed == collections.Counter((f"k{k}", n) for k in range(5) for n in range(1, 401))
    # the job's own modules are read again by the next job: a changed helper is seen
    (tmp_path / "a" / "helper.py").write_text("SUFFIX = 'changed'\n")
    done = _client(service, job, cwd=tmp_path / "a")
    out, _ = done.communicate(timeout=300)
    assert out.strip().endswith("helper changed")


def test_a_failing_job_s_error_and_status_reach_the_client(service: JobService, tmp_path: Path) -> None:
    job = _job(tmp_path / "b", body="StreamEnvironment(parallelism=0)")
    done = _client(service, job, cwd=tmp_path / "b")
    _, err = done.communicate(timeout=300)
    assert done.returncode == 1
    assert err.strip() == "epochal: parallelism must be a positive int, got 0 (job.py, line 17)"


def test_jobs_run_one_at_a_time_and_a_waiting_one_says_so(service: JobService, tmp_path: Path) -> None:
    first = _client(service, _job(tmp_path / "slow", pause=0.002), cwd=tmp_path / "slow")
    for _ in range(1200):  # the first job holds the service
        if service.running is not None or first.poll() is not None:
            break
        threading.Event().wait(0.05)
    assert service.running is not None, first.communicate()
    second = _client(service, _job(tmp_path / "next"), cwd=tmp_path / "next")
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0 and first.wait(timeout=300) == 0
    assert "waiting for the job running on the service to end" in err


def test_a_client_without_the_token_is_refused(service: JobService, tmp_path: Path) -> None:
    done = _client(service, _job(tmp_path / "c"), cwd=tmp_path / "c", token="not-the-token")
    _, err = done.communicate(timeout=60)
    assert done.returncode == 1
    assert err.strip() == (f"epochal: the service at {service.url} refused the job: running a job needs the "
                           "service's token")
    assert not (tmp_path / "c" / "out").exists()


def test_epochal_serve_starts_serves_and_stops(tmp_path: Path) -> None:
    """The command itself, in a process of its own (its own session), stopped by SIGTERM."""
    server = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "serve", "--port", "0", "--master",
                               "local[2]"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        found = re.search(r"serving job files at (http://127\.0\.0\.1:\d+) on Spark local\[2\] \(token for jobs: "
                          r"(\w+)\)", line)
        assert found, line
        with urllib.request.urlopen(found.group(1) + "/status", timeout=10) as response:
            assert b'"master": "local[2]"' in response.read()
        job = _job(tmp_path / "d", records=200)
        done = subprocess.run([sys.executable, "-m", "epochal.cli.main", "run", job, "--service", found.group(1)],
                              cwd=tmp_path / "d", capture_output=True, text=True, timeout=300,
                              env={**os.environ, "EPOCHAL_SERVICE_TOKEN": found.group(2)})
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("served: 200 updates")
    finally:
        server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0
