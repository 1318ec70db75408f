"""Nexmark q1, currency conversion: every bid with its price in euros.

The Nexmark project's q1 (the one its published Flink figures measure):

    SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid

Beam's Query1 converts with `price * 89 / 100` in integer cents; this follows the Nexmark
project, as the benchmark compares with its figures. The euro price comes out as float64
(Flink SQL gives DECIMAL(23, 3)). One `map_batches` call per batch: a vectorized filter on
`kind`, then one pyarrow.compute multiplication over the whole batch.

    python examples/nexmark/q1.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

import argparse
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors.nexmark import NexmarkSource, bids
from epochal.testing import CollectSink

DOLLARS_TO_EUROS = 0.908


def q1(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Nexmark events → its bids, priced in euros."""
    bid = bids(events)
    return pa.RecordBatch.from_arrays(
        [bid["auction"], bid["bidder"], pc.multiply(bid["price"], DOLLARS_TO_EUROS), bid["dateTime"], bid["extra"]],
        names=["auction", "bidder", "price", "dateTime", "extra"],
    )


def run(events: int, parallelism: int, rate: int | None = None, seed: int = 0) -> tuple[CollectSink, float]:
    """Run q1 in process with 1 s checkpoints; return the sink and the run's seconds."""
    sink = CollectSink()
    with tempfile.TemporaryDirectory(prefix="nexmark-q1-") as checkpoints:
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                                checkpoint=CheckpointConfig(interval=1.0, directory=checkpoints))
        (env.from_source(NexmarkSource(events=events, events_per_second=rate, seed=seed,
                                       splits=env.parallelism))  # one split per source subtask
            .map_batches(q1, name="q1")
            .sink_to(sink))
        start = time.perf_counter()
        env.execute("nexmark-q1")
        return sink, time.perf_counter() - start


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--rate", type=int, default=None, help="events per second (default: unpaced)")
    args = parser.parse_args()
    sink, seconds = run(args.events, args.parallelism, args.rate)
    print(f"q1: {args.events:,} events, {len(sink.committed()):,} bids converted in {seconds:.2f} s "
          f"({args.events / seconds:,.0f} events/s)")
