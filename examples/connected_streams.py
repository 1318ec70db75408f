"""Connected streams: orders matched with their payments in one keyed operator with two inputs.

Orders and payments are two JSON-lines streams (written to `orders/` and `payments/` on first
run). `orders.key_by("order").connect(payments.key_by("order"))` puts both into one operator,
keyed by order id on both sides; `MatchPayments`, a `KeyedCoProcessFunction`, keeps each side's
record of an order in keyed state until the other comes, in either order:

- a payment that meets its order, less than `PAY_WITHIN` apart, emits `(order, customer,
  amount, paid)`;
- an order still unpaid `PAY_WITHIN` after it was placed (an event-time timer) goes to the side
  output `UNPAID`, a stream of its own (`side_output`), written to `out-unpaid/`;
- a payment without its order for as long also goes to a side output, `ORPHANS`.

The state of an order holds both sides and lives in the order's key group: it is checkpointed,
restored, rescaled and moved between workers with it. Barriers align over both inputs, and the
operator's watermark is the lower of the two.

Writes the matches to `out-paid/`, the unpaid orders to `out-unpaid/` and the orphan payments to
`out-orphans/`, each exactly once.

    python examples/connected_streams.py                           # from the repository root
    epochal run --executor inprocess examples/connected_streams.py
"""

import datetime as dt
import json
import os
import random

import pyarrow as pa

from epochal import CheckpointConfig, KeyedCoProcessFunction, OutputTag, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink, JsonLinesSource

PAY_WITHIN = dt.timedelta(minutes=15)  # an order unpaid this long after it was placed is reported
DELAY = dt.timedelta(minutes=1)        # how far out of order records come
UNPAID = OutputTag("unpaid")
ORPHANS = OutputTag("orphans")
ORDERS = pa.schema([("order", pa.int64()), ("customer", pa.string()), ("amount", pa.float64()),
                    ("ts", pa.timestamp("s"))])
PAYMENTS = pa.schema([("order", pa.int64()), ("ts", pa.timestamp("s"))])
START = dt.datetime(2026, 11, 28, 9)


def write_inputs(orders: int = 2_000, seed: int = 3) -> None:
    """Orders over two hours; most are paid within minutes, some late, some never; a few
    payments name an order that does not exist."""
    rng = random.Random(seed)
    order_rows, payment_rows = [], []
    for n in range(orders):
        placed = rng.uniform(0, 7_200)
        order_rows.append((placed, {"order": n, "customer": f"c{rng.randrange(300)}",
                                    "amount": round(rng.uniform(5, 500), 2)}))
        roll = rng.random()
        if roll < 0.85:
            payment_rows.append((placed + rng.uniform(5, 600), {"order": n}))
        elif roll < 0.92:
            payment_rows.append((placed + rng.uniform(1_200, 3_000), {"order": n}))  # after PAY_WITHIN
    for n in range(orders, orders + 20):
        payment_rows.append((rng.uniform(0, 7_200), {"order": n}))
    for name, rows in (("orders", order_rows), ("payments", payment_rows)):
        os.makedirs(name, exist_ok=True)
        rows.sort(key=lambda r: r[0] + rng.uniform(0, 30))  # slightly out of order, well within DELAY
        with open(os.path.join(name, f"{name}.jsonl"), "w") as out:
            for at, row in rows:
                out.write(json.dumps({**row, "ts": (START + dt.timedelta(seconds=int(at))).isoformat()}) + "\n")


class MatchPayments(KeyedCoProcessFunction):
    """Per order: the order or the payment, whichever came first, until the other comes. An
    order and its payment match when they are less than `PAY_WITHIN` apart in event time, so the
    result does not depend on which came first, nor on how the inputs interleave."""

    def open(self, ctx):
        self.order = ctx.value_state("order")
        self.paid_at = ctx.value_state("paid_at")

    def process_element1(self, order, ctx):  # (order, customer, amount, ts)
        paid_at = self.paid_at.value()
        if paid_at is not None and abs(paid_at - order[3]) < PAY_WITHIN:
            self.paid_at.clear()
            return [(order[0], order[1], order[2], paid_at)]
        self.order.update(order)
        ctx.timers.register_event_time(order[3] + PAY_WITHIN)
        return None

    def process_element2(self, payment, ctx):  # (order, ts)
        order = self.order.value()
        if order is not None and abs(payment[1] - order[3]) < PAY_WITHIN:
            self.order.clear()
            return [(order[0], order[1], order[2], payment[1])]
        self.paid_at.update(payment[1])
        ctx.timers.register_event_time(payment[1] + PAY_WITHIN)
        return None

    def on_timer(self, timestamp, ctx):
        order = self.order.value()
        if order is not None and order[3] + PAY_WITHIN <= _time(timestamp):  # unpaid: reported, forgotten
            self.order.clear()
            ctx.output(UNPAID, order)
        paid_at = self.paid_at.value()
        if paid_at is not None and paid_at + PAY_WITHIN <= _time(timestamp):
            self.paid_at.clear()
            ctx.output(ORPHANS, (ctx.key, paid_at))


def _time(seconds):
    """A timer's time (seconds since the epoch) as the inputs' naive UTC datetimes."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).replace(tzinfo=None)


if __name__ == "__main__":
    if not os.path.exists("orders"):
        write_inputs()

    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(
        interval=1.0, directory="ckpt-connected", existing="overwrite"))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts")
    orders = env.from_source(JsonLinesSource("orders/", ORDERS), name="orders", watermarks=watermarks)
    payments = env.from_source(JsonLinesSource("payments/", PAYMENTS), name="payments", watermarks=watermarks)
    paid = (orders.key_by("order")
                  .connect(payments.key_by("order"))
                  .process(MatchPayments(), name="match").uid("match"))
    paid.sink_to(FileSink("out-paid/", mode="overwrite"))
    paid.side_output(UNPAID).sink_to(FileSink("out-unpaid/", mode="overwrite"))
    paid.side_output(ORPHANS).sink_to(FileSink("out-orphans/", mode="overwrite"))
    result = env.execute("connected-streams")

    match = result.operator("match")
    print(f"connected streams: {match.records_in:,} orders and payments in, {match.records_out:,} out "
          f"(paid, unpaid and orphans) to out-paid/, out-unpaid/, out-orphans/; {result.restarts} restart(s)")
