"""Nexmark q2, selection: the bids on every 123rd auction, with their price.

Beam's Query2 and the Nexmark project's q2 agree (`auctionSkip` = 123):

    SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0

(The original CQL query named five auction ids; Beam widened it so that it selects bids at
any stream length.) One `map_batches` call per batch: the kind filter, then one vectorized
modulo (numpy, on the column's buffer) and filter.

    python examples/nexmark/q2.py [--events N] [--parallelism P] [--rate EVENTS_PER_SECOND]
"""

import argparse
import tempfile
import time

import pyarrow as pa

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors.nexmark import NexmarkSource, bids
from epochal.testing import CollectSink

AUCTION_SKIP = 123


def q2(events: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of Nexmark events → (auction, price) of the bids on every 123rd auction."""
    bid = bids(events).select(["auction", "price"])
    auction = bid["auction"].to_numpy()  # zero-copy: int64 without nulls
    return bid.filter(pa.array(auction % AUCTION_SKIP == 0))


def run(events: int, parallelism: int, rate: int | None = None, seed: int = 0) -> tuple[CollectSink, float]:
    """Run q2 in process with 1 s checkpoints; return the sink and the run's seconds."""
    sink = CollectSink()
    with tempfile.TemporaryDirectory(prefix="nexmark-q2-") as checkpoints:
        env = StreamEnvironment(parallelism=parallelism, executor="inprocess",
                                checkpoint=CheckpointConfig(interval=1.0, directory=checkpoints))
        (env.from_source(NexmarkSource(events=events, events_per_second=rate, seed=seed,
                                       splits=env.parallelism))  # one split per source subtask
            .map_batches(q2, name="q2")
            .sink_to(sink))
        start = time.perf_counter()
        env.execute("nexmark-q2")
        return sink, time.perf_counter() - start


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--rate", type=int, default=None, help="events per second (default: unpaced)")
    args = parser.parse_args()
    sink, seconds = run(args.events, args.parallelism, args.rate)
    print(f"q2: {args.events:,} events, {len(sink.committed()):,} bids selected in {seconds:.2f} s "
          f"({args.events / seconds:,.0f} events/s)")
