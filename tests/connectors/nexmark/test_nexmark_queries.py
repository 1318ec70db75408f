"""The stateless Nexmark queries of `examples/nexmark/`, run through Epochal in process,
commit exactly what plain pyarrow computes over the whole generated input (as a batch); every
query of `examples/nexmark/` runs as a script (the stateful ones are checked against their
references in `test_nexmark_stateful_queries.py`)."""

from __future__ import annotations

import collections
import importlib.util
import os
import re
import runpy
import sys
import time
import types
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal.connectors.nexmark import NexmarkSource

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "nexmark")
EVENTS = 6_000
SEED = 0  # the examples' seed
QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "q11", "q12"]


def _load_harness() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("nexmark_harness", os.path.join(EXAMPLES, "harness.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


HARNESS = _load_harness()


def _example(name: str) -> types.ModuleType:
    module: types.ModuleType = HARNESS.load(os.path.join(EXAMPLES, f"{name}.py"))
    return module


def _bid_table() -> pa.Table:
    """Every bid of the whole input, from the source's slots: the reference's input."""
    events = pa.Table.from_batches([NexmarkSource(events=EVENTS, seed=SEED).slots(0, EVENTS)])
    bids = events.filter(pc.equal(events["kind"], 2)).column("bid").combine_chunks()
    return pa.Table.from_arrays(bids.flatten(), names=[f.name for f in bids.type])


def _rows(table: pa.Table, columns: list[str]) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(zip(*(table[c].to_pylist() for c in columns)))


def _committed(name: str, parallelism: int = 2) -> collections.Counter[tuple[Any, ...]]:
    from epochal.testing import CollectSink

    sink = CollectSink()
    HARNESS.run(_example(name).query, name=name, events=EVENTS, parallelism=parallelism, seed=SEED, sink=sink)
    return collections.Counter(tuple(r) for r in sink.committed())


def test_q0_commits_every_bid() -> None:
    expected = _rows(_bid_table(), ["auction", "bidder", "price", "dateTime", "extra"])
    assert sum(expected.values()) == EVENTS * 46 // 50
    assert _committed("q0") == expected


def test_q1_commits_every_bid_in_euros() -> None:
    bids = _bid_table()
    euros = bids.set_column(bids.schema.get_field_index("price"), "price", pc.multiply(bids["price"], 0.908))
    assert _committed("q1") == _rows(euros, ["auction", "bidder", "price", "dateTime", "extra"])


def test_q2_commits_the_bids_on_every_123rd_auction() -> None:
    bids = _bid_table()
    expected = collections.Counter(
        (a, p) for a, p in zip(bids["auction"].to_pylist(), bids["price"].to_pylist()) if a % 123 == 0
    )
    assert sum(expected.values()) > 0
    assert _committed("q2", parallelism=3) == expected


SQL_QUERIES = sorted(f"sql/{n[:-3]}" for n in os.listdir(os.path.join(EXAMPLES, "sql")) if n.endswith(".py"))


@pytest.mark.parametrize("path", QUERIES + SQL_QUERIES)
def test_each_query_runs_as_a_script(
    path: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = path.replace("/", "-")  # sql/q2's NAME is sql-q2
    outs = []
    for _ in range(2):  # an example runs twice in a row (issue 40), to the same results
        monkeypatch.setattr(sys, "argv", [f"{name}.py", "--events", "2000", "--parallelism", "1"])
        runpy.run_path(os.path.join(EXAMPLES, f"{path}.py"), run_name="__main__")
        out = capsys.readouterr().out.splitlines()
        assert len(out) == 1 and out[0].startswith(f"{name}: 2,000 events, "), out
        assert "value=(" not in out[0], out  # a result tuple's fields are named (COLUMNS)
        outs.append(re.sub(r" in [\d.]+ s \([\d,]+ events/s\)| to \S+nexmark-\S+", "", out[0]))
    assert outs[0] == outs[1], outs
    # a result, not only a count (issue 40): the last one committed, its fields named
    # (q10 writes Parquet files: it says how many rows and where)
    assert re.search(r"; last result: \w+=", out[0]) or out[0].endswith("; no result") or name.endswith("q10"), out
    if path == "q0":
        assert out[0].startswith("q0: 2,000 events, 1,840 results committed"), out  # the CountSink's count
        # q0 passes bids through: the last is a bid, its time shown as its column has it (a UTC timestamp)
        assert re.search(r"; last result: auction=\d+, bidder=\d+, price=\d+, dateTime=2015-07-15 "
                         r"\d\d:\d\d:\d\d(\.\d+)?, extra=\w+$", out[0]), out


def test_a_job_restored_from_a_checkpoint_commits_every_bid_once(tmp_path: Any) -> None:
    """The source's positions in a checkpoint rewind it exactly: q0 with a failure half-way
    commits what a run without it commits."""
    from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
    from epochal.testing import CollectSink

    q0 = _example("q0").q0
    batches_seen = [0]
    failed = [False]

    def slow_q0_failing_once(events: pa.RecordBatch) -> pa.RecordBatch:
        batches_seen[0] += 1
        checkpointed = any(  # a checkpoint is complete once its manifest is written
            os.path.exists(os.path.join(tmp_path, name, "MANIFEST.json")) for name in os.listdir(tmp_path)
        )
        if batches_seen[0] >= 30 and checkpointed and not failed[0]:
            failed[0] = True
            raise RuntimeError("failing once, half-way")
        time.sleep(0.005)  # spreads the run over several checkpoints
        return q0(events)

    sink = CollectSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess", batch_size=100,
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path)),
                            restart=RestartStrategy(max_restarts=1))
    (env.from_source(NexmarkSource(events=EVENTS, seed=SEED, splits=2))
        .map_batches(slow_q0_failing_once, name="q0")
        .sink_to(sink))
    result = env.execute("nexmark-q0-restored")
    assert result.restarts == 1 and result.restored_from[-1] is not None
    committed = collections.Counter(tuple(r) for r in sink.committed())
    assert committed == _rows(_bid_table(), ["auction", "bidder", "price", "dateTime", "extra"])



def test_every_query_pickles_by_value_for_spark_workers(tmp_path: Any) -> None:
    """A query module loaded by its path (as the benchmark does) ships to a process that cannot
    import it: Spark pickles the job graph with its cloudpickle, and `harness.load` has the
    module's functions and classes pickled by value."""
    import subprocess

    cloudpickle = pytest.importorskip("pyspark.cloudpickle")
    from epochal import StreamEnvironment

    graphs = []
    for name in QUERIES:
        env = StreamEnvironment(parallelism=2, executor="inprocess")
        events = HARNESS.event_stream(env, HARNESS.source(100, splits=2))
        _example(name).query(events).sink_to(HARNESS.CountSink(str(tmp_path / "counts")))
        graphs.append(env.job_graph(f"nexmark-{name}"))
    path = tmp_path / "graphs.pickle"
    path.write_bytes(cloudpickle.dumps(graphs))
    code = "import pickle, sys; graphs = pickle.load(open(sys.argv[1], 'rb')); print(len(graphs))"
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(QUERIES))
