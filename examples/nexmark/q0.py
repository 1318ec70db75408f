"""Nexmark q0, pass-through: every bid, unchanged.

The Nexmark project's q0 (the one its published Flink figures measure):

    SELECT auction, bidder, price, dateTime, extra FROM bid

It measures the source, the framework and the sink, with no work of the query's own: the
ceiling of every other query. On the columnar path the whole query is one `map_batches` call
per batch: select the bids (a vectorized filter on `kind`) and their columns.

    python examples/nexmark/q0.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

import argparse
import tempfile
import time

import pyarrow as pa

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors.nexmark import NexmarkSource, bids
from epochal.testing import CollectSink

COLUMNS = ["auction", "bidder", "price", "dateTime", "extra"]


def q0(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Nexmark events → its bids' columns."""
    return bids(events).select(COLUMNS)


def run(events: int, parallelism: int, rate: int | None = None, seed: int = 0) -> tuple[CollectSink, float]:
    """Run q0 in process with 1 s checkpoints; return the sink and the run's seconds."""
    sink = CollectSink()
    with tempfile.TemporaryDirectory(prefix="nexmark-q0-") as checkpoints:
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                                checkpoint=CheckpointConfig(interval=1.0, directory=checkpoints))
        (env.from_source(NexmarkSource(events=events, events_per_second=rate, seed=seed,
                                       splits=env.parallelism))  # one split per source subtask
            .map_batches(q0, name="q0")
            .sink_to(sink))
        start = time.perf_counter()
        env.execute("nexmark-q0")
        return sink, time.perf_counter() - start


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--rate", type=int, default=None, help="events per second (default: unpaced)")
    args = parser.parse_args()
    sink, seconds = run(args.events, args.parallelism, args.rate)
    print(f"q0: {args.events:,} events, {len(sink.committed()):,} bids committed in {seconds:.2f} s "
          f"({args.events / seconds:,.0f} events/s)")
