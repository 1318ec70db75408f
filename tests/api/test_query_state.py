"""State queries of a running job: a key's committed state (read from the last checkpoint) and its
live value (answered by the subtask that owns the key), by handle, over HTTP and with the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochal import CheckpointConfig, KeyedProcessFunction, StateConfig, StreamEnvironment
from epochal.errors import EpochalError, JobCancelledError, NoCheckpointError
from epochal.state.reader import read_state
from epochal.testing import CollectSink
from spark_jobs import EndlessSource, wait_until


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


class _Tally(KeyedProcessFunction):
    """Two states per key: how many records, and the last three."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.value_state("count", default=0)
        self.recent = ctx.list_state("recent")

    def process_element(self, value: int, ctx: Any) -> None:
        self.count.update(self.count.value() + 1)
        self.recent.update((self.recent.get() + [value])[-3:])


def _idle_job(tmp_path: Path, backend: str = "memory") -> Any:
    """500 records, then an idle source: the state settles and later checkpoints hold it."""
    env = StreamEnvironment(parallelism=2, executor="inprocess", web_port=0, state=StateConfig(backend=backend),
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "c")))
    keyed = env.from_source(EndlessSource(stop_at=500)).key_by(lambda x: f"k{x % 5}")
    keyed.count().uid("counts").sink_to(CollectSink())
    keyed.process(_Tally()).uid("tally").sink_to(CollectSink())
    return env.execute_async("idle")


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_a_live_query_answers_from_the_owner_and_equals_the_committed_state_once_settled(
    tmp_path: Path, backend: str
) -> None:
    handle = _idle_job(tmp_path, backend)
    try:
        wait_until(lambda: handle.query_state("counts", "k3", live=True) == {"count": 100}, "k3 counted", 30)
        settled = handle.status().last_checkpoint or 0
        wait_until(lambda: (handle.status().last_checkpoint or 0) >= settled + 2, "two more checkpoints", 30)
        for key in ("k0", "k1", "k2", "k3", "k4"):  # the keys live on both subtasks
            live = handle.query_state("tally", key, live=True)
            assert live == handle.query_state("tally", key)
            assert live["count"] == 100 and len(live["recent"]) == 3
            assert all(f"k{v % 5}" == key for v in live["recent"])
        assert handle.query_state("tally", "nobody", live=True) == {}
    finally:
        handle.cancel()


def test_a_live_query_runs_ahead_of_the_committed_state_and_needs_no_checkpoints(tmp_path: Path) -> None:
    env = StreamEnvironment(parallelism=2, executor="inprocess", web_port=0)
    env.from_source(EndlessSource()).key_by(lambda x: x % 3).count().uid("counts").sink_to(CollectSink())
    handle = env.execute_async("uncommitted")
    try:
        wait_until(lambda: handle.query_state("counts", 1, live=True).get("count", 0) > 50, "counts", 30)
        first = handle.query_state("counts", 1, live=True)["count"]
        wait_until(lambda: handle.query_state("counts", 1, live=True)["count"] > first, "counts growing", 30)
        with pytest.raises(NoCheckpointError, match="no operator uid 'nope'"):
            handle.query_state("nope", 1, live=True)
        source_uid = handle.metrics().operators[0].uid  # type: ignore[union-attr]
        with pytest.raises(EpochalError, match="has no keyed state"):
            handle.query_state(source_uid, 1, live=True)
    finally:
        handle.cancel()
    with pytest.raises(EpochalError, match="has ended|cancelled"):  # asked before the job master saw the cancel
        handle.query_state("counts", 1, live=True)
    with pytest.raises(JobCancelledError):
        handle.result(timeout=30)
    with pytest.raises(EpochalError, match="has ended"):
        handle.query_state("counts", 1, live=True)


def test_live_queries_over_http_and_the_cli(tmp_path: Path) -> None:
    handle = _idle_job(tmp_path)
    try:
        wait_until(lambda: handle.query_state("counts", "k2", live=True) == {"count": 100}, "k2 counted", 30)
        with urllib.request.urlopen(f"{handle.web_url}/state/counts/k2?live=1", timeout=15) as response:
            body = json.loads(response.read())
        assert body == {"operator": "counts", "key": "k2", "live": True, "checkpoint": None, "state": {"count": 100}}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{handle.web_url}/state/nope/k2?live=1", timeout=15)
        assert refused.value.code == 404

        out = subprocess.run([sys.executable, "-m", "epochal.cli.main", "query", handle.web_url, "tally", "k2",
                              "--live"], capture_output=True, text=True, timeout=60, check=True).stdout
        assert out.startswith("tally 'k2' (live): count=100, recent=[")
        wait_until(lambda: handle.query_state("counts", "k2") == {"count": 100}, "k2 committed", 30)
        out = subprocess.run([sys.executable, "-m", "epochal.cli.main", "query", handle.web_url, "counts", "k2"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        assert out.startswith("counts 'k2' (checkpoint ") and out.rstrip().endswith("count=100")
    finally:
        handle.cancel()


def test_columnar_aggregates_answer_live_and_committed_queries_per_key(tmp_path: Path) -> None:
    """A sum on Arrow batches keeps its state as one table per key group: queries still see keys."""
    import pyarrow as pa

    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "c")))
    (env.from_source(EndlessSource(stop_at=500))
        .map_batches(lambda b: pa.RecordBatch.from_pydict({"k": [f"k{x % 5}" for x in b.column(0).to_pylist()],
                                                            "v": b.column(0)}))
        .key_by("k").sum("v", emit="on_checkpoint").uid("sums").sink_to(CollectSink()))
    handle = env.execute_async("columnar-queries")
    expected = {f"k{r}": sum(x for x in range(500) if x % 5 == r) for r in range(5)}
    try:
        wait_until(lambda: handle.query_state("sums", "k3", live=True) == {"sum": expected["k3"]}, "k3 summed", 30)
        settled = handle.status().last_checkpoint or 0
        wait_until(lambda: (handle.status().last_checkpoint or 0) >= settled + 2, "two more checkpoints", 30)
        for key, total in expected.items():
            assert handle.query_state("sums", key, live=True) == {"sum": total}
            assert handle.query_state("sums", key) == {"sum": total}  # committed: read from the GroupTable
        assert handle.query_state("sums", "nobody", live=True) == {}
        assert {r.key: r.value for r in read_state(str(tmp_path / "c"), "sums")} == expected
    finally:
        handle.cancel()
