"""Joins on event time: ad impressions with their clicks, and clicks with the price valid then.

Three JSON-lines streams (written to `impressions/`, `clicks/` and `prices/` on first run):
impressions `(impression, campaign, ts)`, clicks `(impression, campaign, ts)`, and the cost per
click of each campaign, `(campaign, cpc, ts)`, a new row whenever it changes.

- **Interval join** (attribution): a click counts for its impression when it comes within
  `ATTRIBUTION` after it: `impressions.key_by("impression").interval_join(clicks.key_by(
  "impression")).between(0, ATTRIBUTION)`, left outer (`how="left"`), so every impression is
  emitted, with its click or with None. Each side's records are kept only until the watermark
  passes the last time a record of the other side could meet them.
- **Temporal join** (pricing): each click with the cost per click of its campaign valid at the
  click's time: `clicks.key_by("campaign").temporal_join(prices.key_by("campaign"))`. The price
  versions are a table kept in keyed state; a click waits until the watermark passes it, as a
  newer version could still come.
- Clicks that come after the watermark passed them cannot be attributed exactly (the impression
  may be gone): the join sends them to `late_records("right")`, written to `out-late-clicks/`.

Writes `(impression, campaign, clicked_at or None)` to `out-attributed/`, `(impression, campaign,
clicked_at, cpc)` to `out-charged/` and the late clicks to `out-late-clicks/`, exactly once.

    python examples/ad_clicks.py                           # from the repository root
    epochal run --executor inprocess examples/ad_clicks.py
"""

import datetime as dt
import json
import os
import random

import pyarrow as pa

from epochal import CheckpointConfig, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink, JsonLinesSource

ATTRIBUTION = dt.timedelta(minutes=10)  # a click counts for an impression this long after it
DELAY = dt.timedelta(seconds=30)        # how far out of order records come
START = dt.datetime(2026, 11, 28, 12)
IMPRESSIONS = pa.schema([("impression", pa.int64()), ("campaign", pa.string()), ("ts", pa.timestamp("s"))])
CLICKS = IMPRESSIONS
PRICES = pa.schema([("campaign", pa.string()), ("cpc", pa.float64()), ("ts", pa.timestamp("s"))])


def write_inputs(impressions: int = 3_000, seed: int = 5) -> None:
    """An hour of impressions of 8 campaigns; a tenth are clicked, most within the attribution
    window, some after it, a few uploaded so late the watermark passed them; prices that change
    every few minutes."""
    rng = random.Random(seed)
    rows: dict[str, list[tuple[float, dict[str, object]]]] = {"impressions": [], "clicks": [], "prices": []}
    for n in range(impressions):
        at, campaign = rng.uniform(0, 3_600), f"campaign-{rng.randrange(8)}"
        rows["impressions"].append((at, {"impression": n, "campaign": campaign}))
        if rng.random() < 0.1:
            click = at + (rng.uniform(2, 500) if rng.random() < 0.8 else rng.uniform(700, 1_500))
            rows["clicks"].append((click, {"impression": n, "campaign": campaign}))
    for c in range(8):
        at = -60.0
        while at < 3_600:
            rows["prices"].append((at, {"campaign": f"campaign-{c}", "cpc": round(rng.uniform(0.1, 2.0), 2)}))
            at += rng.uniform(120, 900)
    for name, items in rows.items():
        items.sort(key=lambda r: r[0] + rng.uniform(0, 20))  # out of order, well within DELAY
        if name == "clicks":  # a few clicks uploaded ten minutes late: the watermark passed them
            for i in rng.sample(range(len(items) // 2), 5):
                items.append(items.pop(i))
        os.makedirs(name, exist_ok=True)
        with open(os.path.join(name, f"{name}.jsonl"), "w") as out:
            for at, row in items:
                out.write(json.dumps({**row, "ts": (START + dt.timedelta(seconds=int(at))).isoformat()}) + "\n")


def attributed(impression, click):
    """An impression `(impression, campaign, ts)` with its click's time, or None."""
    return (impression[0], impression[1], None if click is None else click[2])


def charged(click, price):
    """A click `(impression, campaign, ts)` with the cost per click `(campaign, cpc, ts)` valid then."""
    return (click[0], click[1], click[2], price[1])


if __name__ == "__main__":
    if not os.path.exists("impressions"):
        write_inputs()

    env = StreamEnvironment(parallelism=2, batch_size=100, checkpoint=CheckpointConfig(  # batches of 100 rows:
        interval=1.0, directory="ckpt-ad-clicks", existing="overwrite"))              # watermarks between them
    watermarks = WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts")
    impressions = env.from_source(JsonLinesSource("impressions/", IMPRESSIONS), name="impressions",
                                  watermarks=watermarks)
    clicks = env.from_source(JsonLinesSource("clicks/", CLICKS), name="clicks", watermarks=watermarks)
    prices = env.from_source(JsonLinesSource("prices/", PRICES), name="prices", watermarks=watermarks)

    attribution = (impressions.key_by("impression")
                   .interval_join(clicks.key_by("impression"))
                   .between(dt.timedelta(0), ATTRIBUTION)
                   .apply(attributed, how="left", name="attribution").uid("attribution"))
    attribution.sink_to(FileSink("out-attributed/", mode="overwrite"))
    attribution.late_records("right").sink_to(FileSink("out-late-clicks/", mode="overwrite"))

    pricing = (clicks.key_by("campaign")
               .temporal_join(prices.key_by("campaign"))
               .apply(charged, name="pricing").uid("pricing"))
    pricing.sink_to(FileSink("out-charged/", mode="overwrite"))
    result = env.execute("ad-clicks")

    join, priced = result.operator("attribution"), result.operator("pricing")
    print(f"ad clicks: {join.records_out - join.late_records:,} impressions attributed to out-attributed/ "
          f"({join.late_records} late click(s) to out-late-clicks/), {priced.records_out:,} clicks priced to "
          f"out-charged/ ({priced.late_records} too late to price), {result.restarts} restart(s)")
