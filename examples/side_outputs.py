"""Side outputs: one function, several streams out.

Service logs `(service, level, latency_ms, ts)` (JSON lines written to `logs/` on first run) go
through two functions that each send some records elsewhere:

- `Triage`, a `KeyedProcessFunction` per service, passes the requests on and sends errors to the
  side output `ERRORS` (`ctx.output(ERRORS, record)`), counting them per service in keyed state;
- `MinuteStats`, a `ProcessWindowFunction` over one-minute windows of the requests, emits the
  median latency of each service and minute, and sends the minutes with more than `BUSY`
  requests to `BUSY_MINUTES` as well: a `process` with a fourth argument, `ctx`, may do so.

`stream.side_output(tag)` is each side output as a stream of its own. A side output's records
are ordinary records of the job: checkpointed in flight and committed exactly once, like the
main output. A tag nobody reads costs nothing: its records are dropped where they are made.

Writes the per-minute medians to `out-minutes/`, the errors to `out-errors/` and the busy minutes
to `out-busy/`.

    python examples/side_outputs.py                           # from the repository root
    epochal run --executor inprocess examples/side_outputs.py
"""

import datetime as dt
import json
import os
import random
import statistics

import pyarrow as pa

from epochal import CheckpointConfig, KeyedProcessFunction, OutputTag, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink, JsonLinesSource
from epochal.windows import ProcessWindowFunction, Tumbling

ERRORS = OutputTag("errors")
BUSY_MINUTES = OutputTag("busy-minutes")
BUSY = 30  # requests in a minute above which a service's minute is busy
START = dt.datetime(2026, 11, 28, 8)
LOGS = pa.schema([("service", pa.string()), ("level", pa.string()), ("latency_ms", pa.int64()),
                  ("ts", pa.timestamp("s"))])


def write_logs(lines: int = 5_000, seed: int = 9) -> None:
    """Half an hour of logs of five services, one far busier than the others, 3 % errors."""
    rng = random.Random(seed)
    rows = []
    for _ in range(lines):
        service = rng.choice(["api", "api", "api", "api", "auth", "search", "cart", "pay"])
        level = "ERROR" if rng.random() < 0.03 else "INFO"
        rows.append((rng.uniform(0, 1_800), {"service": service, "level": level,
                                             "latency_ms": int(rng.lognormvariate(4.5, 0.6))}))
    rows.sort(key=lambda r: r[0])
    os.makedirs("logs", exist_ok=True)
    with open(os.path.join("logs", "logs.jsonl"), "w") as out:
        for at, row in rows:
            out.write(json.dumps({**row, "ts": (START + dt.timedelta(seconds=int(at))).isoformat()}) + "\n")


class Triage(KeyedProcessFunction):
    """Requests go on; errors go to the side output `ERRORS`, counted per service."""

    def open(self, ctx):
        self.errors = ctx.value_state("errors", default=0)

    def process_element(self, line, ctx):  # (service, level, latency_ms, ts)
        service, level, latency_ms, ts = line
        if level == "ERROR":
            self.errors.update(self.errors.value() + 1)
            ctx.output(ERRORS, line)
            return None
        return ({"service": service, "latency_ms": latency_ms, "ts": ts},)  # "ts": still the event time


class MinuteStats(ProcessWindowFunction):
    """The median latency of a service's minute; a busy minute also to `BUSY_MINUTES`."""

    def process(self, key, window, records, ctx):
        if len(records) > BUSY:
            ctx.output(BUSY_MINUTES, (key, window.start, len(records)))
        yield (key, window.start, statistics.median(r["latency_ms"] for r in records))


if __name__ == "__main__":
    if not os.path.exists("logs"):
        write_logs()

    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(
        interval=1.0, directory="ckpt-side-outputs", existing="overwrite"))
    logs = env.from_source(JsonLinesSource("logs/", LOGS), name="logs",
                           watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp="ts"))
    requests = logs.key_by("service").process(Triage(), name="triage").uid("triage")
    minutes = requests.key_by("service").window(Tumbling(60)).process(MinuteStats(), name="minutes")
    minutes.sink_to(FileSink("out-minutes/", mode="overwrite"))
    requests.side_output(ERRORS).sink_to(FileSink("out-errors/", mode="overwrite"))
    minutes.side_output(BUSY_MINUTES).sink_to(FileSink("out-busy/", mode="overwrite"))
    result = env.execute("side-outputs")

    triage = result.operator("triage")
    print(f"side outputs: {triage.records_in:,} log lines, {triage.records_out:,} out of triage (requests and "
          f"errors) to out-minutes/, out-errors/ and out-busy/, {result.restarts} restart(s)")
