"""Events per second of the Nexmark generator alone, on one core: the ceiling of every query.

No engine: the source's reader is called in a loop (as a source task would call it), and the
generator is also called directly on ranges of ids of several sizes. Arrow's own thread pool is
limited to one thread, so the figures are per core.

    python benchmarks/nexmark_generator.py [--seconds S]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from epochal import SplitReader
from epochal.connectors.nexmark import NexmarkSource


def _measure(label: str, make_batch: Callable[[], pa.RecordBatch], seconds: float) -> None:
    events = 0
    make_batch()  # warm-up: text pools, channel dictionary
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        batch = make_batch()
        events += batch.num_rows
    print(f"{label:<52} {events / elapsed / 1e6:5.2f} M events/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    args = parser.parse_args()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)

    source = NexmarkSource(seed=0)
    generator = source.generator()
    for size in (1024, 8192, 65536):
        position = [0]

        def ids_batch(size: int = size, position: list[int] = position) -> pa.RecordBatch:
            first = position[0]
            position[0] += size
            return generator.events(np.arange(first, first + size, dtype=np.int64))

        _measure(f"generator.events, {size} ids per call", ids_batch, args.seconds)

    for group in (1, 1000):
        for batch in (1024, 8192):
            source = NexmarkSource(seed=0, out_of_order_group=group)
            reader = source.open_split(source.splits()[0], None)

            def read(reader: SplitReader = reader, batch: int = batch) -> pa.RecordBatch:
                events = reader.read(batch)
                assert isinstance(events, pa.RecordBatch)
                return events

            _measure(f"source reader, batch {batch}, out_of_order_group {group}", read, args.seconds)


if __name__ == "__main__":
    main()
