"""Sessionization on event time: user sessions from click logs that arrive out of order.

A session of a user is a run of clicks with no gap of `GAP` or more between two of them
(`Session(gap)` windows, merged as clicks bridge them, in any arrival order). The clicks are
JSON lines in `clicks/` (a reproducible day of clicks is written there on first run): each log
file is written a little out of order, as collectors write them, and a few clicks were uploaded
hours late. Event time is the `ts` field; the watermark trails the largest `ts` read by
`DELAY`, so clicks out of order by less than that are on time. A click that comes after its
session already fired, but within `LATENESS` of its end, updates the session, which fires again
with the new count; a click later than that goes to `late-clicks/`, never lost silently.

Writes `(user, window_start, window_end, count)` per session to `out-sessions/` and the late
clicks to `late-clicks/`, both exactly once, on the embedded local Spark with two workers.

    python examples/sessions_event_time.py                           # from the repository root
    epochal run --executor inprocess examples/sessions_event_time.py
"""

import datetime as dt
import json
import os
import random

import pyarrow as pa

from epochal import CheckpointConfig, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink, JsonLinesSource
from epochal.windows import Session

GAP = dt.timedelta(minutes=30)       # inactivity that ends a session
DELAY = dt.timedelta(minutes=2)      # how far out of order a click may come and still be on time
LATENESS = dt.timedelta(minutes=10)  # how long a fired session still takes late clicks
SCHEMA = pa.schema([("user", pa.string()), ("ts", pa.timestamp("s")), ("page", pa.string())])
DAY = dt.datetime(2026, 11, 28)


def write_clicks(directory: str, files: int = 4, users: int = 1_000, seed: int = 7) -> None:
    """A day of clicks: each user's sessions are bursts of clicks seconds to minutes apart,
    hours apart from each other. Each file holds some users' clicks, shuffled within a minute
    (collectors batch and reorder), and ends with a few clicks uploaded hours after they happened."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    for f in range(files):
        clicks: list[tuple[float, str, str]] = []
        for u in range(f, users, files):
            start = rng.uniform(0, 3_600)
            for _ in range(rng.randint(1, 4)):  # sessions
                t = start
                for _ in range(rng.randint(1, 12)):  # clicks in a session, under GAP apart
                    clicks.append((t, f"user{u:02d}", rng.choice(["home", "search", "item", "cart"])))
                    t += rng.uniform(5, 600)
                start = t + rng.uniform(3_600, 4 * 3_600)
        clicks.sort()
        arrival = [(t + rng.uniform(0, 60), t, user, page) for t, user, page in clicks]  # < DELAY out of order
        arrival.sort()
        stragglers = [(t, user, page) for t, user, page in rng.sample(clicks, 2)]
        with open(os.path.join(directory, f"clicks-{f}.jsonl"), "w") as out:
            for _, t, user, page in arrival:
                out.write(json.dumps({"user": user, "ts": _iso(t), "page": page}) + "\n")
            for t, user, page in stragglers:  # uploaded hours late: past the lateness
                out.write(json.dumps({"user": user, "ts": _iso(t), "page": page}) + "\n")


def _iso(seconds: float) -> str:
    return (DAY + dt.timedelta(seconds=int(seconds))).isoformat()


if __name__ == "__main__":
    if not os.path.exists("clicks"):
        write_clicks("clicks")

    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(
        interval=1.0, directory="ckpt-sessions", existing="overwrite"))
    clicks = env.from_source(JsonLinesSource("clicks/", SCHEMA),
                             watermarks=WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts"))
    sessions = (clicks.key_by("user")
                      .window(Session(gap=GAP))
                      .allowed_lateness(LATENESS)
                      .count(name="sessions"))
    sessions.sink_to(FileSink("out-sessions/", mode="overwrite"))
    sessions.late_records().sink_to(FileSink("late-clicks/", mode="overwrite"))
    result = env.execute("sessions")

    window = result.operator("sessions")
    print(f"sessions: {window.records_out:,} session results committed to out-sessions/, "
          f"{window.late_records} late click(s) to late-clicks/, {result.restarts} restart(s)")
