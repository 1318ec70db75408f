"""Side outputs of a co-process function, a window join's process function and a process window
function, end to end in process across a crash of an input: the output and the side output each
commit exactly their part of the reference, once (the keyed process function's case is in
test_two_input_jobs.py)."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from two_input_jobs import (
    ODD_PAIRS,
    WINDOW,
    PairsOddToTheSide,
    WindowIds,
    committed,
    env_of,
    expected,
    records,
    sources,
    with_crash,
)

from epochal.api.stream import DataStream
from epochal.cluster.inprocess import InProcessExecutor
from epochal.testing import CollectSink
from epochal.windows import ProcessWindowFunction, Tumbling


def _odd(record_id: str) -> bool:
    return int(record_id[1:]) % 2 == 1


class _WindowIdsOddToTheSide(WindowIds):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Iterable[Any]:
        for row in super().process_element(left, right, ctx):
            if _odd(row[1]):
                ctx.output(ODD_PAIRS, row)
            else:
                yield row


class _OddWindowsToTheSide(ProcessWindowFunction):
    def process(self, key: Any, window: Any, records: Any, ctx: Any) -> Iterable[Any]:
        row = (key, window.start, tuple(sorted(r["id"] for r in records)))
        if math.floor(window.start / 2.0) % 2:
            ctx.output(ODD_PAIRS, row)
        else:
            yield row


def _job(kind: str, a: DataStream, b: DataStream) -> DataStream:
    if kind == "co_process":
        return a.key_by("k").connect(b.key_by("k")).process(PairsOddToTheSide()).uid("j")
    if kind == "window_join":
        return a.join(b).where("k").equal_to("k").window(WINDOW).process(_WindowIdsOddToTheSide()).uid("j")
    return a.key_by("k").window(Tumbling(2.0)).process(_OddWindowsToTheSide()).uid("j")


def _reference(kind: str, left: list[Any], right: list[Any]) -> tuple[Counter[Any], Counter[Any]]:
    """(what goes out, what goes to the side output)."""
    if kind == "co_process":
        every, odd = expected("co_process", left, right), lambda row: _odd(row[0])
    elif kind == "window_join":
        every, odd = expected("window", left, right), lambda row: _odd(row[1])
    else:
        windows: dict[tuple[Any, float], list[str]] = {}
        for r in left:
            windows.setdefault((r["k"], math.floor(r["t"] / 2.0) * 2.0), []).append(r["id"])
        every = Counter((k, s, tuple(sorted(ids))) for (k, s), ids in windows.items())
        odd = lambda row: math.floor(row[1] / 2.0) % 2 == 1  # noqa: E731
    side = Counter({row: n for row, n in every.items() if odd(row)})
    return every - side, side


@pytest.mark.parametrize("kind", ["co_process", "window_join", "process_window"])
def test_side_outputs_commit_their_part_once_across_a_crash(tmp_path: Path, kind: str) -> None:
    rng = random.Random(29)
    left, right = records(rng, 160, "l", keys=6), records(rng, 80, "r", keys=6)
    env = env_of(2, str(tmp_path / "c"))
    a, b = sources(env, with_crash(left, 110), right)
    out = _job(kind, a, b)
    main, side = CollectSink(), CollectSink()
    out.sink_to(main)
    out.side_output(ODD_PAIRS).sink_to(side)
    result = InProcessExecutor(seed=7, virtual_time=True, step_time=0.001).execute(env.job_graph(f"side-{kind}"))
    assert result.restarts == 1 and result.restored_from[1] is not None, "restored from a checkpoint"
    want_main, want_side = _reference(kind, left, right)
    assert want_main and want_side
    assert committed(main.committed()) == want_main
    assert committed(side.committed()) == want_side
