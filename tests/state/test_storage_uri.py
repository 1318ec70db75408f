"""The checkpoint directory may be any pyarrow filesystem URI, not only a local path."""

from __future__ import annotations

from epochal import CheckpointConfig, StreamEnvironment
from epochal.cluster.inprocess import InProcessExecutor
from epochal.state.storage import CheckpointStorage
from epochal.testing import CollectSink, Crash, ListSource


def test_a_job_checkpoints_to_and_restores_from_a_filesystem_uri(tmp_path) -> None:
    uri = f"file://{tmp_path}/ckpt"
    words = [f"w{i % 5}" for i in range(300)]
    env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=10,
                            checkpoint=CheckpointConfig(interval=0.002, directory=uri))
    sink = CollectSink()
    source = ListSource(words[:295] + [Crash()] + words[295:], splits=2, batch_size=5)
    env.from_source(source).key_by(lambda w: w).count().sink_to(sink)
    result = InProcessExecutor(seed=1, virtual_time=True).execute(env.job_graph("uri"))
    assert result.restored_from[-1] is not None  # restored from a checkpoint read through the URI
    assert sorted(sink.committed()) == sorted((f"w{k}", n) for k in range(5) for n in range(1, 61))
    storage = CheckpointStorage(uri)
    assert storage.root == f"{tmp_path}/ckpt"
    assert storage.latest() is not None and (tmp_path / "ckpt").is_dir()
