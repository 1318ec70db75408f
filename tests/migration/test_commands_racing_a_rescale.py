"""A move or a savepoint asked for while a rescale's checkpoint is under way: every caller gets
its answer at once, while the job runs.

Before, a move begun while the checkpoint of a rescale by restore was under way waited for ever:
the rescale's checkpoint completed first, the host left the attempt (`RescaleByRestore`) and a new job
master took over, and nobody ended the move. Its rerouting checkpoint could also complete first
and subsume the rescale's, whose caller then waited until the job ended. A savepoint asked for
meanwhile met either fate. Found by a seeded stress of moves and rescales near the end of input.

Each case runs the in-process host on a virtual clock from a seed, so its interleaving replays;
the seeds are ones where, before, each of the two checkpoints completed first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, CheckpointError, EpochalError, Source, SplitReader, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.commands import Command, Move, Rescale, Savepoint, Ticket
from epochal.runtime.master.command_desk import RescaleByRestore
from epochal.runtime.master.control import JobControl
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.testing import CollectSink

KEYS = 7
ANSWER_WITHIN = 10.0  # seconds: far less than the job runs (it runs until the test stops it)


class _Split:
    def __init__(self, i: int) -> None:
        self.split_id = f"n-{i}"
        self.index = i


class _Reader(SplitReader):
    """Numbers i, i + 2, ..., ten a read, until `stop` is set."""

    def __init__(self, split: _Split, position: int | None, stop: threading.Event) -> None:
        self.next = split.index if position is None else position
        self.stop = stop

    def read(self, max_records: int) -> list[int] | None:
        if self.stop.is_set():
            return None
        out = list(range(self.next, self.next + 20, 2))
        self.next = out[-1] + 2
        return out

    def position(self) -> int:
        return self.next


class Endless(Source):
    """Two splits of numbers, read until the test sets `stop`."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def splits(self) -> list[Any]:
        return [_Split(0), _Split(1)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _Reader(split, position, self.stop)


def _race(tmp_path: Path, seed: int, second: Command[Any]) -> tuple[str, BaseException | None,
                                                                         BaseException | None]:
    """Queue a rescale by restore (2 -> 1) and then `second`, run the job on a virtual clock, and
    wait for the callers' answers while it runs: the host's outcome, and the error each caller
    got (None: it succeeded; the rescale's is None too once the host left by `RescaleByRestore`, whose
    catcher answers it)."""
    stop = threading.Event()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(directory=str(tmp_path / "c")))  # no periodic ones
    env.from_source(Endless(stop)).key_by(lambda x: x % KEYS).count().uid("count").sink_to(CollectSink())
    job = env.job_graph("racing")
    control = JobControl(job.name, 2)
    rescale = control.submit(Rescale(1))
    other = control.submit(second)
    outcome: list[str] = []

    def host() -> None:
        try:
            InProcessExecutor(seed=seed, virtual_time=True).execute(job, None, control)
            outcome.append("finished")
        except RescaleByRestore as exc:  # the caller of `execute` relaunches the job; here the test looks
            outcome.append(f"rescale from {exc.checkpoint_id}")

    thread = threading.Thread(target=host, daemon=True)
    thread.start()
    try:
        other_error = _answer(other, lambda: False)
        rescale_error = _answer(rescale, lambda: not thread.is_alive())
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive() and outcome
    return outcome[0], rescale_error, other_error


def _answer(command: Ticket[Any], left: Callable[[], bool]) -> BaseException | None:
    """The error `command`'s caller gets (None: a result), within `ANSWER_WITHIN` seconds of a
    job that runs until the test stops it; None as well once `left()` (the host left)."""
    deadline = time.monotonic() + ANSWER_WITHIN
    while time.monotonic() < deadline:
        try:
            command.wait(0.01)
        except TimeoutError:
            if left():
                return None
            continue
        except Exception as exc:  # noqa: BLE001 - what the caller gets
            return exc
        return None
    raise AssertionError(f"the {command.command.kind} got no answer in {ANSWER_WITHIN} s while the job ran")


def _a_move() -> Move:
    group = key_group_of(0)
    return Move(((group, 1 - RoutingTable.contiguous(2, 128).owners[group]),))


@pytest.mark.parametrize("seed", [0, 6])  # before: 0 the rescale's checkpoint completed first, 6 the move's
def test_a_move_while_a_rescales_checkpoint_is_under_way_is_refused_at_once(tmp_path: Path, seed: int) -> None:
    outcome, _, error = _race(tmp_path, seed, _a_move())
    assert outcome == "rescale from 1"  # the rescale went ahead
    assert isinstance(error, EpochalError) and "a rescale is under way; no move" in str(error), error


@pytest.mark.parametrize("seed", [0, 10])  # before: 0 the rescale's checkpoint completed first, 10 the savepoint's
def test_a_savepoint_while_a_rescales_checkpoint_is_under_way_gets_its_answer(tmp_path: Path, seed: int) -> None:
    target = tmp_path / "sp"
    outcome, rescale_error, error = _race(tmp_path, seed, Savepoint(str(target)))
    if outcome == "rescale from 1":  # the host left the attempt: the savepoint's checkpoint, unless done, never is
        assert (error is None and target.exists()) or (
            isinstance(error, EpochalError) and "abandoned: the job is rescaling" in str(error)), error
    else:  # the savepoint's checkpoint completed first and subsumed the rescale's
        assert error is None and target.exists()
        assert isinstance(rescale_error, CheckpointError) and "subsumed by checkpoint 2" in str(rescale_error)
