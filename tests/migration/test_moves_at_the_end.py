"""A move in steps when the job's input ends: the steps stop, the move ends with an error, and
the job's final checkpoint is its last.

Before, the next step of a batched move (or a step whose read-ahead was under way) started after
the final checkpoint was triggered: its rerouting checkpoint completed after the final one, its
new owners had finished and never took the groups over, and the caller of `move_key_groups`
waited for ever (found on Spark by `tests/fault/test_spark_migration_chaos.py`).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from tests.api.test_rescale_and_savepoint import SlowSequence, _expected

from epochal import CheckpointConfig, EpochalError, StreamEnvironment
from epochal.state.keygroups import RoutingTable, key_group_of
from epochal.testing import CollectSink

KEYS = 7


def test_a_batched_move_under_way_when_the_input_ends_stops_and_the_final_checkpoint_is_the_last(
    tmp_path: Path,
) -> None:
    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    env.from_source(SlowSequence()).key_by(lambda x: x % KEYS).count().uid("count").sink_to(sink)
    handle = env.execute_async("moves-at-the-end")
    start = RoutingTable.contiguous(2, 128)
    groups = sorted({key_group_of(k) for k in range(KEYS)})
    errors: list[str] = []

    def move_there_and_back() -> None:  # one group per checkpoint, until the job ends
        step = 0
        while not handle.done():
            step += 1
            try:
                handle.move_key_groups({g: (start.owners[g] + step) % 2 for g in groups}, batch=1, timeout=10)
            except EpochalError as exc:
                errors.append(str(exc))
            except TimeoutError:
                errors.append("a move never ended")
                return

    mover = threading.Thread(target=move_there_and_back)
    mover.start()
    result = handle.result(timeout=60)
    mover.join(timeout=30)
    assert not mover.is_alive() and "a move never ended" not in errors
    assert any("is ending; the key groups not moved yet stay" in e for e in errors), errors
    assert result.checkpoints[-1].is_final, [(c.checkpoint_id, c.is_final) for c in result.checkpoints]
    assert Counter(sink.committed()) == _expected()
