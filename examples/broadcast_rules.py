"""Broadcast state: sensor readings checked against alert rules that change while the job runs.

Two JSON-lines streams (written to `readings/` and `rules/` on first run): readings `(sensor,
kind, value, ts)` and rules `(kind, limit, ts)`, a new limit for a kind of sensor from `ts` on.
The rules are few and every subtask needs all of them: `rules.broadcast(LIMITS)` sends each rule
to every subtask of the operator it is connected to, which keeps them in the broadcast state
`LIMITS` (a map: kind -> its limits over time). The readings are keyed by sensor:
`readings.key_by("sensor").connect(rules.broadcast(LIMITS)).process(Alerts())`, a
`KeyedBroadcastProcessFunction`:

- `process_broadcast_element` (every subtask, every rule) adds the rule to the broadcast state:
  only the broadcast side writes it, so every subtask holds the same copy;
- `process_element` (a reading, on its sensor's subtask) waits in keyed state for the watermark
  to pass it (an event-time timer), so that every rule up to its time has come, whatever the
  interleaving of the two streams; `on_timer` then reads the limit valid at its time (read only)
  and emits an alert `(sensor, kind, value, limit, ts)` when the value is above it, counting the
  sensor's alerts in keyed state. A reading of a kind no rule names goes to the side output
  `UNKNOWN`.

The broadcast state is checkpointed once (all copies are the same) and restored into every
subtask at any parallelism; the keyed state moves with its key group.

Writes the alerts to `out-alerts/` and the readings of unknown kinds to `out-unknown/`.

    python examples/broadcast_rules.py                           # from the repository root
    epochal run --executor inprocess examples/broadcast_rules.py
"""

import datetime as dt
import json
import math
import os
import random

import pyarrow as pa

from epochal import (
    CheckpointConfig,
    KeyedBroadcastProcessFunction,
    MapStateDescriptor,
    OutputTag,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.connectors import FileSink, JsonLinesSource

LIMITS = MapStateDescriptor("limits")
UNKNOWN = OutputTag("unknown")
DELAY = dt.timedelta(seconds=10)
START = dt.datetime(2026, 11, 28, 6)
READINGS = pa.schema([("sensor", pa.string()), ("kind", pa.string()), ("value", pa.float64()),
                      ("ts", pa.timestamp("s"))])
RULES = pa.schema([("kind", pa.string()), ("limit", pa.float64()), ("ts", pa.timestamp("s"))])
KINDS = ["temperature", "pressure", "humidity"]


def write_inputs(readings: int = 4_000, seed: int = 11) -> None:
    """Two hours of readings of 40 sensors (a few of a kind without rules), and limits that
    tighten and loosen every half hour or so."""
    rng = random.Random(seed)
    rows = {"readings": [], "rules": []}
    for _ in range(readings):
        sensor = rng.randrange(40)
        kind = "vibration" if sensor >= 38 else KINDS[sensor % 3]
        rows["readings"].append((rng.uniform(0, 7_200), {"sensor": f"s{sensor}", "kind": kind,
                                                         "value": round(rng.gauss(50, 15), 1)}))
    for kind in KINDS:
        at = -1.0
        while at < 7_200:
            rows["rules"].append((at, {"kind": kind, "limit": float(rng.choice([60, 70, 80]))}))
            at += rng.uniform(900, 2_700)
    for name, items in rows.items():
        items.sort(key=lambda r: r[0] + rng.uniform(0, 5))  # out of order, within DELAY
        os.makedirs(name, exist_ok=True)
        with open(os.path.join(name, f"{name}.jsonl"), "w") as out:
            for at, row in items:
                out.write(json.dumps({**row, "ts": (START + dt.timedelta(seconds=int(max(at, 0)))).isoformat()}) + "\n")


def _seconds(ts):
    return ts.replace(tzinfo=dt.UTC).timestamp()


class Alerts(KeyedBroadcastProcessFunction):
    def open(self, ctx):
        self.waiting = ctx.map_state("waiting")  # reading time -> readings at it
        self.alerts = ctx.value_state("alerts", default=0)

    def process_broadcast_element(self, rule, ctx):  # (kind, limit, ts): every subtask
        limits = ctx.broadcast_state(LIMITS)
        versions = limits.get(rule[0]) or ()
        limits.put(rule[0], tuple(sorted((*versions, (_seconds(rule[2]), rule[1])))))

    def process_element(self, reading, ctx):  # (sensor, kind, value, ts): its sensor's subtask
        at = _seconds(reading[3])
        self.waiting.put(at, [*(self.waiting.get(at) or []), reading])
        ctx.timers.register_event_time(math.nextafter(at, math.inf))  # once every rule up to `at` came

    def on_timer(self, timestamp, ctx):
        at = math.nextafter(timestamp, -math.inf)
        limits = ctx.broadcast_state(LIMITS)  # read only here
        for sensor, kind, value, ts in self.waiting.get(at) or []:
            valid = [limit for since, limit in limits.get(kind) or () if since <= at]
            if not valid:
                ctx.output(UNKNOWN, (sensor, kind, value, ts))
            elif value > valid[-1]:
                self.alerts.update(self.alerts.value() + 1)
                yield (sensor, kind, value, valid[-1], ts)
        self.waiting.remove(at)


if __name__ == "__main__":
    if not os.path.exists("readings"):
        write_inputs()

    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(
        interval=1.0, directory="ckpt-broadcast", existing="overwrite"))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(DELAY, timestamp="ts")
    readings = env.from_source(JsonLinesSource("readings/", READINGS), name="readings", watermarks=watermarks)
    rules = env.from_source(JsonLinesSource("rules/", RULES), name="rules", watermarks=watermarks)
    alerts = (readings.key_by("sensor")
                      .connect(rules.broadcast(LIMITS))
                      .process(Alerts(), name="alerts").uid("alerts"))
    alerts.sink_to(FileSink("out-alerts/", mode="overwrite"))
    alerts.side_output(UNKNOWN).sink_to(FileSink("out-unknown/", mode="overwrite"))
    result = env.execute("broadcast-rules")

    op = result.operator("alerts")
    print(f"broadcast rules: {op.records_in:,} readings and rules in, {op.records_out:,} alerts and unknown "
          f"readings out to out-alerts/ and out-unknown/, {result.restarts} restart(s)")
