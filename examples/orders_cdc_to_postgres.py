"""Keep a table of totals per customer from another table's changes, exactly once.

The `orders` table's inserts, updates and deletes are read from a logical replication slot
(`PostgresCdcSource`); each change adds or takes back its amount; a running sum per customer is
upserted into `customer_totals` (`PostgresSink(key="customer")`), each checkpoint's rows in one
prepared transaction. `orders` has REPLICA IDENTITY FULL, so an update also carries the row as
it was (it comes as a "delete" of the old row, then the "update"), and a delete the whole row.

The script starts a throw-away PostgreSQL server for itself (or uses EPOCHAL_EXAMPLE_DSN), writes
the orders, reads the changes up to that moment (`bounded=True`), and prints one line.

    python examples/orders_cdc_to_postgres.py                      # from the repository root
    epochal run --executor inprocess examples/orders_cdc_to_postgres.py
"""

import os
import random
import shutil
import tempfile

import psycopg

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors import PostgresCdcSource, PostgresSink
from epochal.connectors.postgres.server import LocalPostgres

CHECKPOINTS = "ckpt-orders"


def write_orders(dsn: str) -> None:
    """The tables, the slot (changes from here on are read), then orders that change."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders, customer_totals, epochal_sink_epochs")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer text, amount bigint)")
        conn.execute("ALTER TABLE orders REPLICA IDENTITY FULL")
        conn.execute("CREATE TABLE customer_totals (customer text PRIMARY KEY, total bigint)")
    PostgresCdcSource(dsn, "orders", slot="orders_totals").check()
    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(300):
            conn.execute("INSERT INTO orders VALUES (%s, %s, %s)", (i, f"c{rng.randrange(5)}", rng.randrange(100)))
        conn.execute("UPDATE orders SET amount = amount * 2 WHERE id % 7 = 0")
        conn.execute("UPDATE orders SET customer = 'c9' WHERE id % 11 = 0")
        conn.execute("DELETE FROM orders WHERE id % 13 = 0")


def signed(change: tuple) -> tuple[str, int]:
    """(customer, amount) to add: op, table, lsn, commit_time, id, customer, amount."""
    op, customer, amount = change[0], change[5], change[6]
    return (customer, -amount if op == "delete" else amount)


def main(dsn: str) -> str:
    write_orders(dsn)
    shutil.rmtree(CHECKPOINTS, ignore_errors=True)  # a run starts over (the tables were made again)
    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.2, directory=CHECKPOINTS))
    (env.from_source(PostgresCdcSource(dsn, "orders", slot="orders_totals", bounded=True))
        .map(signed)
        .key_by(lambda c: c[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .key_by(lambda c: c[0])
        .sink_to(PostgresSink(dsn, "customer_totals", key="customer")))
    env.execute("orders-totals")
    with psycopg.connect(dsn, autocommit=True) as conn:
        totals = conn.execute("SELECT customer, total FROM customer_totals ORDER BY customer").fetchall()
        truth = conn.execute("SELECT customer, sum(amount) FROM orders GROUP BY customer ORDER BY customer").fetchall()
        conn.execute("SELECT pg_drop_replication_slot('orders_totals')")  # a retired job's slot holds WAL
    return f"{len(totals)} customers, totals match the orders table: {totals == truth}"


if __name__ == "__main__":
    if "EPOCHAL_EXAMPLE_DSN" in os.environ:
        print(main(os.environ["EPOCHAL_EXAMPLE_DSN"]))
    else:
        server = LocalPostgres(tempfile.mkdtemp(prefix="epochal-example-pg-")).start()
        try:
            print(main(server.dsn))
        finally:
            server.stop("immediate")
            shutil.rmtree(server.directory, ignore_errors=True)
