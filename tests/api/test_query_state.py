"""Live state queries: a key's committed state from a running job, by handle and over HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, StreamEnvironment
from epochal.errors import NoCheckpointError
from epochal.state.reader import read_state
from epochal.testing import CollectSink
from spark_jobs import EndlessSource


def _start(tmp_path: Path) -> Any:
    env = StreamEnvironment(parallelism=2, executor="inprocess", web_port=0,
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "c")))
    env.from_source(EndlessSource()).key_by(lambda x: f"k{x % 5}").count().uid("counts").sink_to(CollectSink())
    return env.execute_async("queried")


def test_a_query_equals_the_committed_state_of_the_same_checkpoint(tmp_path: Path) -> None:
    handle = _start(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while (handle.status().last_checkpoint or 0) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        checkpoint, values = handle._control.query_state("counts", "k3")
        assert values and checkpoint is not None
        # the same checkpoint, read whole by the offline reader: the same value for k3
        rows = {(r.key, r.state): r.value for r in read_state(str(tmp_path / "c"), "counts", checkpoint)}
        assert {state: value for (key, state), value in rows.items() if key == "k3"} == values
        assert handle.query_state("counts", "nobody") == {}
        with pytest.raises(NoCheckpointError, match="no state of operator uid"):
            handle.query_state("no-such-uid", "k3")

        with urllib.request.urlopen(f"{handle.web_url}/state/counts/%22k3%22", timeout=5) as response:
            body = json.loads(response.read())
        assert body["key"] == "k3" and body["operator"] == "counts" and body["checkpoint"] >= checkpoint
        assert list(body["state"].values())[0] >= list(values.values())[0]  # counts only grow
    finally:
        handle.cancel()


def test_queries_need_a_checkpoint_directory() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    env.from_source(EndlessSource()).key_by(lambda x: x % 2).count().sink_to(CollectSink())
    handle = env.execute_async("no-directory")
    try:
        with pytest.raises(NoCheckpointError, match="needs CheckpointConfig"):
            handle.query_state("count", 1)
    finally:
        handle.cancel()
