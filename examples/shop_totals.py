"""Keyed aggregates on Arrow batches, aggregated locally before the key exchange.

Sales (`shop`, `amount`, `at`) are generated as Parquet files, read with `ParquetSource`, and per
shop the job keeps the total, the largest sale and the mean sale (`sum`, `max`, `mean`), a
vectorized aggregate function of its own (`SpreadOfAmounts`: the smallest and the largest
amount, merged with numpy ufuncs), and sales per shop per minute (a `Tumbling(60)` window).
Every aggregate emits once per checkpoint (`emit="on_checkpoint"`), so each runs in two phases:
a local phase next to the source folds each shop's sales into one partial per epoch (and per
minute slice for the window), and only the partials cross the key exchange. Results go to
Parquet (`out-shops/…`), committed exactly once per checkpoint.

    python examples/shop_totals.py                            # from the repository root
    epochal run --executor inprocess examples/shop_totals.py

Every run starts over (`existing="overwrite"`, `mode="overwrite"`): the output is one run's.
"""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from epochal import BatchAggregateFunction, CheckpointConfig, StreamEnvironment, WatermarkStrategy
from epochal.connectors import ParquetSink, ParquetSource, read_committed
from epochal.windows import Tumbling

SHOPS = 50
SALES = 200_000


def write_sales(directory: str, files: int = 4) -> None:
    """`SALES` sales over `SHOPS` shops, in event-time order, as Parquet files."""
    rng = np.random.default_rng(7)
    os.makedirs(directory, exist_ok=True)
    per_file = SALES // files
    for f in range(files):
        shop = rng.integers(0, SHOPS, per_file)
        table = pa.table({
            "shop": pa.array([f"shop-{s:02d}" for s in shop.tolist()]),
            "amount": pa.array(rng.integers(1, 500, per_file), pa.int64()),
            "at": pa.array(np.arange(f * per_file, (f + 1) * per_file) * 0.01, pa.float64()),  # seconds
        })
        pq.write_table(table, os.path.join(directory, f"sales-{f}.parquet"))


class SpreadOfAmounts(BatchAggregateFunction):
    """The smallest and the largest amount per shop, a whole batch at a time."""

    accumulators = {"low": np.minimum, "high": np.maximum}

    def add_batch(self, batch, codes, groups):
        amount = batch.column("amount").to_numpy()
        low = np.full(groups, np.iinfo(np.int64).max)
        high = np.full(groups, np.iinfo(np.int64).min)
        np.minimum.at(low, codes, amount)
        np.maximum.at(high, codes, amount)
        return {"low": low, "high": high}

    def result(self, acc):
        return acc["high"] - acc["low"]


if __name__ == "__main__":
    if not os.path.exists("sales"):
        write_sales("sales")

    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=0.5, directory="ckpt-shops", existing="overwrite"))
    sales = env.from_source(ParquetSource("sales/", in_order=True),
                            watermarks=WatermarkStrategy.bounded_out_of_orderness(0.0, timestamp="at"))
    shops = sales.key_by("shop")
    for name, stream in {
        "total": shops.sum("amount", emit="on_checkpoint"),
        "largest": shops.max("amount", emit="on_checkpoint"),
        "mean": shops.mean("amount", emit="on_checkpoint"),
        "spread": shops.aggregate(SpreadOfAmounts(), emit="on_checkpoint"),
        "per-minute": shops.window(Tumbling(60)).count(),
    }.items():
        stream.sink_to(ParquetSink(f"out-shops/{name}", mode="overwrite"), name=f"{name}-out")
    result = env.execute("shop_totals")

    totals = {r[0]: r[1] for r in read_committed("out-shops/total")}
    minutes = sum(r[-1] for r in read_committed("out-shops/per-minute"))
    crossed = sum(result.operator(n).records_in for n in ("sum", "max", "mean", "aggregate"))
    print(f"shop_totals: {len(totals)} shops, {sum(totals.values()):,} in sales, {minutes:,} sales in "
          f"per-minute windows; {crossed:,} partial rows crossed the key exchange for "
          f"{4 * result.operator('sum-local').records_in:,} sales read by the four aggregates")
