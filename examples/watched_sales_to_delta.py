"""Follow a directory of sales files into a Delta table, with event-time windows.

Each file that lands in `landing-sales/` holds one minute of sales as CSV lines
`seconds,store,cents`. The job watches the directory (`TextFileSource(watch=...)`), sums each
store's sales per minute of event time (`Tumbling(60)`, watermarks 5 s behind the newest sale),
and upserts every window's total into the Delta table `sales-per-minute/`, one row per store
and minute. Files arrive while the job runs (a thread here plays the upstream system: it writes
each file under a hidden name and renames it in, so the job never sees half a file).

The job runs until it is cancelled, as a streaming job does. Once the table holds the minutes
whose windows are closed, this script cancels it and prints one line. The last minute stays
open: its window fires when a later file moves the watermark past its end; start the job again
from its checkpoint (`from_checkpoint="latest"`) and drop in the next file to see it.

    python examples/watched_sales_to_delta.py                        # from the repository root
    epochal run --executor inprocess examples/watched_sales_to_delta.py
"""

import os
import random
import shutil
import sys
import threading
import time

import pyarrow as pa

try:
    from deltalake import DeltaTable
except ImportError:  # an extra: say which, rather than a bare ModuleNotFoundError
    sys.exit("watched_sales_to_delta: this example writes a Delta table with the deltalake library: "
             "pip install 'epochal[delta]' (from a clone of the repository: pip install '.[delta]')")

from epochal import CheckpointConfig, JobCancelledError, StreamEnvironment, WatermarkStrategy
from epochal.connectors import DeltaSink, TextFileSource
from epochal.windows import Tumbling

LANDING, TABLE, CHECKPOINTS = "landing-sales", "sales-per-minute", "ckpt-sales"
STORES = ("north", "south", "east")
MINUTES = 4  # files written; the windows of the first MINUTES - 1 minutes close

SCHEMA = pa.schema([("store", pa.string()), ("minute", pa.float64()), ("cents", pa.int64())])


def land(minute: int) -> None:
    """One minute of sales, written elsewhere and renamed in."""
    rng = random.Random(minute)
    lines = [f"{minute * 60 + rng.uniform(0, 59.9):.1f},{rng.choice(STORES)},{rng.randrange(100, 5000)}\n"
             for _ in range(200)]
    lines.sort(key=lambda line: float(line.split(",")[0]))  # a file is in time order, roughly
    hidden = os.path.join(LANDING, f".minute-{minute:03d}.csv")
    with open(hidden, "w") as f:
        f.writelines(lines)
    os.rename(hidden, os.path.join(LANDING, f"minute-{minute:03d}.csv"))


def parse(line: str) -> dict:
    seconds, store, cents = line.split(",")
    return {"at": float(seconds), "store": store, "cents": int(cents)}


def closed_minutes() -> int:
    """How many minutes the table holds rows of (it exists once the sink's check made it)."""
    minutes = DeltaTable(TABLE).to_pyarrow_table(columns=["minute"]).column("minute").to_pylist()
    return len(set(minutes))


def main() -> None:
    for path in (LANDING, TABLE, CHECKPOINTS):
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(LANDING)
    land(0)

    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.5, directory=CHECKPOINTS))
    sales = env.from_source(TextFileSource(LANDING, watch=0.2)).map(parse)
    # idleness: a subtask that has read all its files stops holding the others' windows back
    timed = sales.assign_timestamps(WatermarkStrategy.bounded_out_of_orderness(5.0, timestamp="at").with_idleness(1.0))
    (timed
        .key_by(lambda sale: sale["store"])
        .window(Tumbling(60))
        .sum(lambda sale: sale["cents"])
        .map(lambda w: {"store": w[0], "minute": w[1], "cents": w[3]})
        .sink_to(DeltaSink(TABLE, merge_key=["store", "minute"], schema=SCHEMA, mode="overwrite")))
    handle = env.execute_async("watched-sales")

    def upstream() -> None:  # the rest of the minutes arrive while the job runs
        for minute in range(1, MINUTES):
            time.sleep(0.5)
            land(minute)

    arrivals = threading.Thread(target=upstream)
    arrivals.start()
    arrivals.join()
    deadline = time.monotonic() + 120
    while closed_minutes() < MINUTES - 1 and time.monotonic() < deadline and not handle.done():
        time.sleep(0.1)
    handle.cancel()
    try:
        handle.result(timeout=60)
    except JobCancelledError:
        pass
    print(f"watched_sales_to_delta: {closed_minutes()} closed minutes of {len(STORES)} stores in {TABLE}/")


if __name__ == "__main__":
    main()
