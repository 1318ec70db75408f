"""The `epochal` command line."""

from __future__ import annotations

import os
import textwrap

from epochal.cli.main import main
from epochal.connectors import read_committed


def _job_file(tmp_path) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(f"""
        from epochal import StreamEnvironment, CheckpointConfig
        from epochal.connectors import FileSink
        from epochal.testing import ListSource

        env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.01))
        (env.from_source(ListSource([f"k{{i % 5}}" for i in range(2000)], splits=2))
            .key_by(lambda k: k).count().sink_to(FileSink({str(tmp_path / "out")!r})))
        if __name__ == "__main__":
            env.execute("cli-job")
    """))
    return str(path)


def test_run_applies_overrides_and_reports_progress(tmp_path, capsys) -> None:
    ckpt = str(tmp_path / "ckpt")
    code = main(["run", _job_file(tmp_path), "--executor", "inprocess", "--parallelism", "3", "--checkpoint-dir", ckpt])
    assert code == 0
    records = read_committed(str(tmp_path / "out"))
    assert sorted(map(tuple, records)) == sorted((f"k{k}", n) for k in range(5) for n in range(1, 401))
    assert any(name.startswith("chk-") for name in os.listdir(ckpt))  # --checkpoint-dir took effect


def test_checkpoints_list_shows_complete_checkpoints(tmp_path, capsys) -> None:
    ckpt = str(tmp_path / "ckpt")
    assert main(["run", _job_file(tmp_path), "--executor", "inprocess", "--checkpoint-dir", ckpt]) == 0
    capsys.readouterr()
    assert main(["checkpoints", "list", ckpt]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["id", "time", "bytes", "duration"]
    assert out[-1].rstrip().endswith("final")


def test_checkpoints_list_of_a_missing_directory_is_an_error_not_a_new_directory(tmp_path, capsys) -> None:
    missing = str(tmp_path / "nope")
    assert main(["checkpoints", "list", missing]) == 1
    assert not os.path.exists(missing)
    assert "no checkpoint directory" in capsys.readouterr().err


def test_from_checkpoint_outside_the_checkpoint_directory_is_refused(tmp_path, capsys) -> None:
    ckpt = str(tmp_path / "ckpt")
    assert main(["run", _job_file(tmp_path), "--executor", "inprocess", "--checkpoint-dir", ckpt]) == 0
    capsys.readouterr()
    code = main(["run", _job_file(tmp_path), "--executor", "inprocess", "--checkpoint-dir", str(tmp_path / "other"),
                 "--from-checkpoint", os.path.join(ckpt, "chk-00000001")])
    assert code == 1
    assert "not in the job's checkpoint directory" in capsys.readouterr().err
