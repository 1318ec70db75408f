"""Clickstream sessions from a NATS JetStream stream into PostgreSQL, exactly once.

Clicks arrive on the subjects `clicks.0` … `clicks.3` of the stream `CLICKSTREAM` (a user's
clicks always on the same shard, a little out of order, as collectors send them); each subject
is a partition of the source, read from its checkpointed stream sequence. A user's session is a
run of clicks with no gap of `GAP` or more (`Session` windows on the click's own time, `ts`,
watermarks `DELAY` behind the newest click of each subject). Each session, `(user, start, end,
clicks)`, is upserted into the PostgreSQL table `click_sessions` by `(user_id, session_start)`,
each checkpoint's rows in one prepared transaction committed when the checkpoint completes
(`PostgresSink`; docs/connectors.md).

The job reads what the stream holds when it starts (`bounded=True`, a backfill) and ends; the
same job without `bounded` follows the stream. A first run on an empty stream publishes a
reproducible day of clicks; every run makes the table anew.

The servers: `NATS_URL` (e.g. `nats://127.0.0.1:4222`, a server started with
`nats-server -js -a 127.0.0.1 -p 4222 -sd /tmp/nats`) and `EPOCHAL_EXAMPLE_DSN` (a PostgreSQL
connection string); each one unset is started by this script for itself, on a free port with its
data in a temporary directory, and stopped at the end (`epochal.testing.nats_server`,
`epochal.connectors.postgres.server.LocalPostgres`).

    python examples/clickstream_sessions.py                          # from the repository root
    epochal run --executor inprocess examples/clickstream_sessions.py

`tests/fault/test_spark_clickstream.py` runs this job on Spark and kills a worker mid-run: the
table holds the same sessions as a run without the kill.
"""

import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator

import nats  # the nats extra (pip install 'epochal[nats]'): publishes the clicks
import nats.js.errors
import psycopg  # the postgres extra: makes the table and reads it back
import pyarrow as pa
from nats.js.api import StreamConfig

from epochal import CheckpointConfig, StreamEnvironment, WatermarkStrategy
from epochal.connectors import PostgresSink
from epochal.connectors.jetstream import JetStreamSource
from epochal.connectors.log import JsonFormat
from epochal.connectors.postgres.server import LocalPostgres
from epochal.testing import nats_server
from epochal.windows import Session

GAP = dt.timedelta(minutes=30)  # inactivity that ends a session
DELAY = dt.timedelta(minutes=2)  # how far out of order a click may come and still be on time
SHARDS = 4
CLICKS = pa.schema([("user", pa.string()), ("ts", pa.timestamp("s")), ("page", pa.string())])
TABLE = """CREATE TABLE click_sessions (user_id text, session_start double precision,
    session_end double precision, clicks bigint, PRIMARY KEY (user_id, session_start))"""
DAY = dt.datetime(2026, 11, 28)


def clicks_of_a_day(users: int = 500, seed: int = 7) -> list[tuple[str, bytes]]:
    """(subject, payload) of a day of clicks: bursts seconds to minutes apart, hours between
    sessions, each shard's clicks sent in time order give or take a minute."""
    rng = random.Random(seed)
    shards: list[list[tuple[float, str, bytes]]] = [[] for _ in range(SHARDS)]
    for u in range(users):
        user, t = f"user{u:03d}", rng.uniform(0, 3_600)
        for _ in range(rng.randint(1, 4)):  # sessions
            for _ in range(rng.randint(1, 12)):  # clicks in a session, under GAP apart
                at = (DAY + dt.timedelta(seconds=int(t))).isoformat()
                payload = json.dumps({"user": user, "ts": at, "page": rng.choice(["home", "item", "cart"])}).encode()
                shards[u % SHARDS].append((t + rng.uniform(0, 60), f"clicks.{u % SHARDS}", payload))
                t += rng.uniform(5, 600)
            t += rng.uniform(3_600, 4 * 3_600)
    return [(subject, payload) for shard in shards for _, subject, payload in sorted(shard)]


async def publish_clicks(url: str, users: int = 500) -> int:
    """Create CLICKSTREAM if missing and publish the clicks of `users` into it if empty; the
    clicks in it."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        await js.stream_info("CLICKSTREAM")
    except nats.js.errors.NotFoundError:
        await js.add_stream(StreamConfig(name="CLICKSTREAM", subjects=["clicks.*"]))
    if not (await js.stream_info("CLICKSTREAM")).state.messages:
        for subject, payload in clicks_of_a_day(users):
            await js.publish(subject, payload)
    clicks = (await js.stream_info("CLICKSTREAM")).state.messages
    await nc.close()
    return clicks


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A throw-away PostgreSQL server; its connection string."""
    server = LocalPostgres(tempfile.mkdtemp(prefix="clickstream-pg-")).start()
    try:
        yield server.dsn
    finally:
        server.stop("immediate")
        shutil.rmtree(server.directory, ignore_errors=True)


def new_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS click_sessions, epochal_sink_epochs")
        conn.execute(TABLE)


def sessions_committed(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT count(*) FROM click_sessions").fetchone()[0])


def sessions_job(url: str, dsn: str, checkpoints: str, **environment: object) -> StreamEnvironment:
    """The job: clicks from JetStream, sessions per user, upserted into PostgreSQL. `environment`
    goes to `StreamEnvironment` (a test runs it on its own Spark session, with a worker killed)."""
    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(
        interval=1.0, directory=checkpoints, existing="overwrite"), **environment)  # type: ignore[arg-type]
    source = JetStreamSource(url, "CLICKSTREAM", JsonFormat(CLICKS), bounded=True)
    watermarks = WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts").with_idleness(5.0)
    (env.from_source(source, watermarks=watermarks)
        .key_by("user")
        .window(Session(gap=GAP))
        .count(name="sessions")
        .map(lambda s: (s[0], s[1], s[2], s[3]))  # (user, start, end, clicks): the table's columns
        .sink_to(PostgresSink(dsn, "click_sessions", key=("user_id", "session_start"))))
    return env


if __name__ == "__main__":
    with contextlib.ExitStack() as servers:  # each server not given is one of this script's own
        url = os.environ.get("NATS_URL") or servers.enter_context(nats_server())
        dsn = os.environ.get("EPOCHAL_EXAMPLE_DSN") or servers.enter_context(postgres())
        clicks = asyncio.run(publish_clicks(url))
        new_table(dsn)
        result = sessions_job(url, dsn, "ckpt-clickstream").execute("clickstream-sessions")
        print(f"clickstream_sessions: {sessions_committed(dsn):,} sessions of {clicks:,} clicks committed to the "
              f"PostgreSQL table click_sessions, {result.restarts} restart(s)")
