"""The local phase's bounds: past `max_rows` rows or `max_bytes` bytes of Arrow batches it ships
its partials before the barrier (fewer, larger shipments are cheaper, but memory is bounded)."""

from __future__ import annotations

import pyarrow as pa

from epochal.plan.aggregates import AggregateCall, AggregateKind, LocalAggregateSpec, LocalWindowSpec
from epochal.plan.specs import WindowFunctionKind
from epochal.plan.time import EventTime
from epochal.runtime.operators.aggregates.local import LocalAggregateOperator
from epochal.runtime.operators.aggregates.local_windows import LocalWindowOperator
from epochal.windows import Tumbling

COUNT = AggregateCall(AggregateKind.COUNT, None, None, "count")


def test_the_local_phase_ships_early_past_its_rows_or_its_bytes_not_before() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array(["a", "bb", "a", "ccc"] * 256)], names=["word"])

    def shipped(**bounds: int) -> list[pa.RecordBatch | None]:
        local = LocalAggregateOperator(LocalAggregateSpec("count-local", "count-local", "word", (COUNT,), **bounds))
        return [local.process(batch) for _ in range(3)]

    assert shipped() == [None, None, None]  # held until the barrier
    by_rows = shipped(max_rows=2 * batch.num_rows)
    assert by_rows[0] is None and by_rows[1] is not None and by_rows[2] is None  # the second reaches it
    by_bytes = shipped(max_bytes=batch.nbytes + 1)
    assert by_bytes[0] is None and by_bytes[1] is not None and by_bytes[2] is None
    counts = dict(zip(*(by_bytes[1].column(i).to_pylist() for i in range(2)), strict=True))
    assert counts == {"a": 1024, "bb": 512, "ccc": 512}  # both batches, as one shipment


def test_a_local_window_phase_ships_early_past_its_bytes() -> None:
    batch = pa.RecordBatch.from_pydict({"k": ["a", "b"] * 100, "ts": [1.0, 2.0] * 100, "wide": ["x" * 50] * 200})

    def shipped(**bounds: int) -> list[object]:
        spec = LocalWindowSpec("w", "w", "k", (("w", Tumbling(3.0)),), WindowFunctionKind.COUNT, EventTime("ts"),
                               **bounds)
        local = LocalWindowOperator(spec)
        return [local.process(batch) for _ in range(3)]

    assert shipped() == [None, None, None]
    held = batch.select(["k", "ts"]).nbytes  # what it holds of a batch: the key and the time
    by_bytes = shipped(max_bytes=held + 1)
    assert by_bytes[0] is None and by_bytes[1] is not None and by_bytes[2] is None
