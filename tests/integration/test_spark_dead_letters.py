"""Dead letters on local Spark (classic and Spark Connect): bad lines go to a FileSink exactly once,
across a restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource, read_committed

pytestmark = pytest.mark.spark


def test_dead_letters_reach_a_file_sink_exactly_once_across_a_restart(any_spark: Any, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good: list[int] = []
    bad: list[str] = []
    for f in range(2):
        lines = []
        for i in range(300):
            n = f * 1000 + i
            if i % 10 == 3:
                lines.append(f"bad-{n}")
                bad.append(f"bad-{n}")
            else:
                lines.append(str(n))
                good.append(n)
        (corpus / f"part-{f}.txt").write_text("\n".join(lines) + "\n")
    marker = str(tmp_path / "crashed")

    def crash_once(n: int) -> int:  # a failure outside the dead-letter policy: the job restarts
        if n == 1250 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected crash")
        return n

    env = StreamEnvironment(
        parallelism=2, spark=any_spark, dead_letter=FileSink(str(tmp_path / "dlq")),
        checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "ckpt")),
        restart=RestartStrategy(max_restarts=2, delay=0),
    )
    (env.from_source(TextFileSource(str(corpus)))
        .map(int, on_error="dead_letter", name="parse")
        .map(crash_once)
        .sink_to(FileSink(str(tmp_path / "out"))))
    result = env.execute("dead-letters")
    assert result.restarts == 1 and os.path.exists(marker)
    assert sorted(read_committed(str(tmp_path / "out"))) == sorted(good)
    letters = read_committed(str(tmp_path / "dlq"))
    assert sorted(d["record"] for d in letters) == sorted(bad)  # each bad line once
    assert {d["operator"] for d in letters} == {"parse"}
    assert all(d["error"].startswith("ValueError: invalid literal for int()") for d in letters)
    assert all(d["position"]["split"] for d in letters) or all(d["position"] is None for d in letters)
