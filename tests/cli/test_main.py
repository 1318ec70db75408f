"""The `epochal` command line."""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from epochal.cli.main import main
from epochal.connectors import read_committed
from epochal.state.storage import CheckpointStorage

# `records in 2,000 (135,905/s)  out 2,000  checkpoints 3 (last 1 ms)  restarts 0`, one line per report
# off a terminal (tests/cli/test_progress.py has the terminal's panel)
PROGRESS_LINE = re.compile(
    r"^records in [\d,]+ \([\d,]+/s\)  out [\d,]+(  watermark .+)?  checkpoints \d+ \(last (\d+ ms|-)\)"
    r"  restarts \d+$", re.MULTILINE
)


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
    assert PROGRESS_LINE.search(capsys.readouterr().err), "no progress line on stderr"
    storage = CheckpointStorage(ckpt, create=False)  # --checkpoint-dir took effect: the checkpoints are there
    final = storage.load_manifest(max(storage.complete_checkpoints()))
    assert final.is_final
    # --parallelism 3 replaced the job's parallelism=2: every operator ran (and checkpointed) 3 subtasks
    assert {op.uid: (op.parallelism, len(op.subtasks)) for op in final.operators} == {
        uid: (3, 3) for uid in ("source", "count", "sink")
    }


def test_run_without_overrides_keeps_the_job_s_parallelism(tmp_path, capsys) -> None:
    ckpt = str(tmp_path / "ckpt")
    assert main(["run", _job_file(tmp_path), "--executor", "inprocess", "--checkpoint-dir", ckpt]) == 0
    storage = CheckpointStorage(ckpt, create=False)
    final = storage.load_manifest(max(storage.complete_checkpoints()))
    assert {op.parallelism for op in final.operators} == {2}


def test_run_passes_arguments_after_the_double_dash_and_restores_sys_argv(tmp_path, capsys) -> None:
    job = tmp_path / "args.py"
    job.write_text("import sys\nprint(sys.argv[1:])\n")
    before = list(__import__("sys").argv)
    assert main(["run", str(job), "--executor", "inprocess", "--", "--flag", "x"]) == 0
    assert capsys.readouterr().out.strip() == "['--flag', 'x']"
    assert __import__("sys").argv == before


def test_run_of_a_missing_job_file_is_one_line_not_a_traceback(tmp_path, capsys) -> None:
    assert main(["run", str(tmp_path / "nope.py")]) == 1
    assert capsys.readouterr().err == f"epochal: no such job file: {str(tmp_path / 'nope.py')!r}\n"


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_run_refuses_a_parallelism_that_is_not_positive(tmp_path, capsys, value) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", _job_file(tmp_path), "--parallelism", value])
    assert exit_.value.code == 2
    assert "--parallelism: must be a positive integer" in capsys.readouterr().err


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
    captured = capsys.readouterr()
    assert captured.err == f"epochal: no such checkpoint directory: {missing!r}\n"
    assert captured.out == ""


@pytest.mark.parametrize("directory", ["", "nope://bucket/ckpt", "file-not-dir"])
def test_checkpoints_list_of_what_is_no_checkpoint_directory_says_so_in_one_line(
    tmp_path, capsys, monkeypatch, directory
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file-not-dir").write_text("")
    assert main(["checkpoints", "list", directory]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"epochal: no such checkpoint directory: {directory!r}")
    assert len(err.splitlines()) == 1  # no traceback


def test_savepoint_of_a_missing_directory_is_an_error(tmp_path, capsys) -> None:
    missing = str(tmp_path / "nope")
    assert main(["savepoint", missing, str(tmp_path / "target")]) == 1
    assert capsys.readouterr().err == f"epochal: no such checkpoint directory: {missing!r}\n"
    assert not os.path.exists(missing) and not os.path.exists(tmp_path / "target")


def test_from_checkpoint_outside_the_checkpoint_directory_is_refused(tmp_path, capsys) -> None:
    ckpt = str(tmp_path / "ckpt")
    assert main(["run", _job_file(tmp_path), "--executor", "inprocess", "--checkpoint-dir", ckpt]) == 0
    capsys.readouterr()
    code = main(["run", _job_file(tmp_path), "--executor", "inprocess", "--checkpoint-dir", str(tmp_path / "other"),
                 "--from-checkpoint", os.path.join(ckpt, "chk-00000001")])
    assert code == 1
    assert "not in the job's checkpoint directory" in capsys.readouterr().err


def test_version_is_the_installed_distribution_s(capsys) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"epochal {importlib.metadata.version('epochal')}\n"
