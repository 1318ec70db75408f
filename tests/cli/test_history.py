"""A job's history in its checkpoint directory, and `epochal history DIR` (issue 40): after the
job ended its endpoint is gone; what it showed (checkpoints, restarts and their causes, final
metrics) stays, as in Flink's history server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from epochal.cli.main import main
from epochal.runtime.master.history import HISTORY_DIR, read_history


def _job_file(tmp_path: Path, fail_once: bool = False, records: int = 2_000) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(f"""
        import os, time
        from epochal import StreamEnvironment, CheckpointConfig, RestartStrategy
        from epochal.connectors import FileSink
        from epochal.testing import ListSource

        marker = {str(tmp_path / "failed-once")!r}

        def parse(x):
            if {fail_once!r} and x == 1500 and not os.path.exists(marker):
                open(marker, "w").close()
                raise ValueError("a record the parser did not expect")
            time.sleep(0.0005)
            return x

        env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.1,
                                directory={str(tmp_path / "ckpt")!r}, resume="auto"),
                                restart=RestartStrategy(max_restarts=2), batch_size=50)
        (env.from_source(ListSource(list(range({records})), splits=2)).map(parse, name="parse")
            .key_by(lambda x: x % 7).count().sink_to(FileSink({str(tmp_path / "out")!r})))
        if __name__ == "__main__":
            env.execute("recorded")
    """))
    return str(path)


def test_a_run_s_history_shows_its_checkpoints_restarts_and_final_counts(tmp_path: Path, capsys: Any) -> None:
    assert main(["run", _job_file(tmp_path, fail_once=True), "--executor", "inprocess"]) == 0
    capsys.readouterr()
    (run,) = read_history(str(tmp_path / "ckpt"))
    assert run.job == "recorded" and run.state == "finished" and run.ended_at is not None
    assert run.summary is not None and run.summary.startswith("job 'recorded' finished: 2,000 records in, 2,000 out")
    assert run.metrics is not None
    restarts = run.metrics["restarts"]
    assert len(restarts) == 1 and restarts[0]["operator"] == "parse" and "ValueError" in restarts[0]["cause"]
    assert any(c["is_final"] for c in run.metrics["checkpoints"])

    assert main(["history", str(tmp_path / "ckpt")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["run", "job", "state", "started", "took", "checkpoints", "restarts"]
    assert f"{run.run}  recorded  finished" in out
    assert "job 'recorded' finished: 2,000 records in, 2,000 out" in out
    assert "attempt 1 failed at" in out and "ValueError: a record the parser did not expect" in out
    assert "(operator 'parse', record 1500)" in out
    assert "completed" in out and "final" in out
    assert "operators (the whole job):" in out and re.search(r"\n    parse +in 2,000, out 2,000\n", out)

    assert main(["history", str(tmp_path / "ckpt"), "--json"]) == 0
    stored = json.loads(capsys.readouterr().out)
    assert stored["run"] == run.run and stored["metrics"]["restarts"][0]["operator"] == "parse"


def test_a_run_killed_mid_way_leaves_its_history_up_to_then_and_the_next_run_its_own(
    tmp_path: Path, capsys: Any
) -> None:
    job = _job_file(tmp_path, records=8_000)
    proc = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", job, "--executor", "inprocess"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    history = tmp_path / "ckpt" / HISTORY_DIR
    deadline = time.monotonic() + 60
    while not (history.exists() and os.listdir(history)):  # the first checkpoint recorded it
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert main(["run", job, "--executor", "inprocess"]) == 0  # resume="auto": it resumes
    capsys.readouterr()
    killed, resumed = read_history(str(tmp_path / "ckpt"))
    assert killed.state == "running" and killed.ended_at is None and killed.summary is None, (killed, resumed)
    assert resumed.state == "finished" and "since checkpoint" in (resumed.summary or "")
    assert main(["history", str(tmp_path / "ckpt"), "--run", killed.run[:17]]) == 0
    out = capsys.readouterr().out
    assert "(last recorded" in out and "it runs still, or its driver died" in out


def test_history_of_a_missing_directory_is_one_line(tmp_path: Path, capsys: Any) -> None:
    assert main(["history", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err == f"epochal: no such checkpoint directory: {str(tmp_path / 'nope')!r}\n"


def test_an_unknown_run_is_named(tmp_path: Path, capsys: Any) -> None:
    assert main(["run", _job_file(tmp_path, records=200), "--executor", "inprocess"]) == 0
    capsys.readouterr()
    assert main(["history", str(tmp_path / "ckpt"), "--run", "nope"]) == 1
    assert capsys.readouterr().err.startswith("epochal: no single run 'nope' in this history (the newest: ")


def test_history_serves_the_run_s_dashboard_until_stopped(tmp_path: Path, capsys: Any) -> None:
    import urllib.request

    assert main(["run", _job_file(tmp_path, records=200), "--executor", "inprocess"]) == 0
    capsys.readouterr()
    proc = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "history", str(tmp_path / "ckpt"),
                             "--web-port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+) \(Ctrl-C ends\)", line)
        assert found, line
        with urllib.request.urlopen(found.group(1) + "/status", timeout=10) as response:
            status = json.loads(response.read())
        assert status["archived"] and status["state"] == "finished" and status["job"] == "recorded"
        with urllib.request.urlopen(found.group(1) + "/", timeout=10) as response:
            assert b"dashboard.js" in response.read()
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
