"""Clickstream sessions from a NATS JetStream stream, written back to JetStream exactly once.

Clicks arrive on the subjects `clicks.0` … `clicks.3` of the stream `CLICKSTREAM` (a user's
clicks always on the same shard, a little out of order, as collectors send them); each subject
is a partition of the source, read from its checkpointed stream sequence. A user's session is a
run of clicks with no gap of `GAP` or more (`Session` windows on the click's own time, `ts`,
watermarks `DELAY` behind the newest click of each subject). Each session, `(user, start, end,
clicks)`, is published to the subject `sessions.all` of the stream `SESSIONS` when the
checkpoint that covers it completes, each message with a `Nats-Msg-Id`, so a commit repeated
after a failure is stored once (docs/connectors.md, "JetStreamSink").

The job reads what the stream holds when it starts (`bounded=True`, a backfill) and ends; the
same job without `bounded` follows the stream. A first run on an empty stream publishes a
reproducible day of clicks; every run replaces the sessions of the run before.

The server: `NATS_URL` (e.g. `nats://127.0.0.1:4222`, a server started with
`nats-server -js -a 127.0.0.1 -p 4222 -sd /tmp/nats`), or, if unset, the same command on a free
port with its data in a temporary directory, which this script starts and stops
(`epochal.testing.nats_server`).

    python examples/clickstream_sessions.py                          # from the repository root
    epochal run --executor inprocess examples/clickstream_sessions.py

(The sessions belong in a database; once the PostgreSQL sink lands, `sessions.all` becomes a
table upserted by `(user, start)`.)
"""

import asyncio
import contextlib
import datetime as dt
import json
import os
import random

import pyarrow as pa

from epochal import CheckpointConfig, StreamEnvironment, WatermarkStrategy
from epochal.connectors.jetstream import JetStreamSink, JetStreamSource
from epochal.connectors.log import JsonFormat
from epochal.testing import nats_server
from epochal.windows import Session

GAP = dt.timedelta(minutes=30)  # inactivity that ends a session
DELAY = dt.timedelta(minutes=2)  # how far out of order a click may come and still be on time
SHARDS = 4
CLICKS = pa.schema([("user", pa.string()), ("ts", pa.timestamp("s")), ("page", pa.string())])
SESSIONS = pa.schema([("user", pa.string()), ("start", pa.float64()), ("end", pa.float64()),
                      ("clicks", pa.int64())])
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


async def prepare(url: str) -> int:
    """Create the streams if missing, publish the clicks into an empty CLICKSTREAM, empty
    SESSIONS (this run's output replaces the last one's); the clicks in the stream."""
    import nats
    import nats.js.errors
    from nats.js.api import StreamConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    for name, subjects in (("CLICKSTREAM", ["clicks.*"]), ("SESSIONS", ["sessions.>"])):
        try:
            await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            await js.add_stream(StreamConfig(name=name, subjects=subjects, duplicate_window=600.0))
    if not (await js.stream_info("CLICKSTREAM")).state.messages:
        for subject, payload in clicks_of_a_day():
            await js.publish(subject, payload)
    await js.purge_stream("SESSIONS")
    clicks = (await js.stream_info("CLICKSTREAM")).state.messages
    await nc.close()
    return clicks


def sessions_committed(url: str) -> int:
    async def count() -> int:
        import nats

        nc = await nats.connect(url)
        messages = (await nc.jetstream().stream_info("SESSIONS")).state.messages
        await nc.close()
        return messages

    return asyncio.run(count())


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        url = os.environ.get("NATS_URL") or stack.enter_context(nats_server())  # else a server of its own
        clicks = asyncio.run(prepare(url))
        env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(
            interval=1.0, directory="ckpt-clickstream", existing="overwrite"))
        source = JetStreamSource(url, "CLICKSTREAM", JsonFormat(CLICKS), bounded=True)
        watermarks = WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts").with_idleness(5.0)
        (env.from_source(source, watermarks=watermarks)
            .key_by("user")
            .window(Session(gap=GAP))
            .count(name="sessions")
            .map(lambda s: {"user": s[0], "start": s[1], "end": s[2], "clicks": s[3]})
            .sink_to(JetStreamSink(url, "sessions.all", JsonFormat(SESSIONS), name="sessions")))
        result = env.execute("clickstream-sessions")
        print(f"clickstream_sessions: {sessions_committed(url):,} sessions of {clicks:,} clicks committed to "
              f"the JetStream stream SESSIONS, {result.restarts} restart(s)")
