"""A sink's operator state is its pending commits (and, for a writer idempotent per epoch, its
lineage): a sink with none pending whose writer has no lineage writes no file."""

from __future__ import annotations

import collections
from typing import Any

from epochal import CheckpointConfig, StreamEnvironment
from epochal.api.connector import Sink, SinkWriter
from epochal.cluster.inprocess import InProcessExecutor
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, Crash, ListSource


class _Writer(SinkWriter):
    def write(self, batch: Any) -> None:
        pass

    def prepare_commit(self, checkpoint_id: int) -> Any:
        return None  # nothing to commit, ever


class _QuietSink(Sink):
    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _Writer()


def test_a_sink_with_nothing_to_commit_writes_no_state_file_and_still_restores(tmp_path) -> None:
    directory = str(tmp_path / "ckpt")
    env = StreamEnvironment(
        parallelism=2, executor="inprocess", batch_size=16,
        checkpoint=CheckpointConfig(interval=0.01, directory=directory),
    )
    words = [f"w{i % 7}" for i in range(3000)]
    collected = CollectSink()
    source = ListSource(words[:2000] + [Crash()] + words[2000:], splits=2)
    counts = env.from_source(source).key_by(lambda w: w).count()
    counts.sink_to(collected, name="collected")
    counts.sink_to(_QuietSink(), name="quiet")

    result = InProcessExecutor(seed=3, virtual_time=True).execute(env.job_graph("sinks"))

    assert result.restarts == 1 and result.restored_from[-1] is not None
    manifest = CheckpointStorage(directory).latest()
    assert manifest is not None
    files = {op.uid: [st.operator for st in op.subtasks] for op in manifest.operators}
    quiet = next(uid for uid in files if uid.startswith("quiet"))
    kept = next(uid for uid in files if uid.startswith("collected"))
    assert files[quiet] == [None, None]  # no `{}` files
    assert all(handle is not None for handle in files[kept])  # pending commits are state
    totals = collections.Counter(words)
    assert sorted(collected.committed()) == sorted((w, n) for w, c in totals.items() for n in range(1, c + 1))
