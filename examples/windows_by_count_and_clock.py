"""Windows by count, by the clock, over a whole stream, and with triggers.

One stream of readings `{"sensor", "t", "value"}` (event time `t`), four window jobs in one:

- `count_window(5)`: each sensor's readings five at a time: `(sensor, first, end, mean)`;
- `window(Tumbling(0.5), time="processing")`: readings per sensor per half second of the task's
  clock (processing time: when they arrived, not when they happened);
- `window_all(Tumbling(60))`: the maximum of every sensor's readings per minute of event time
  (not keyed: one subtask holds every record; the results have no key);
- `window(Tumbling(60), trigger=EventTimeTrigger().with_early_firings(every=0.2))`: each
  sensor's minute total, with partial totals every 0.2 s of processing time before the minute
  closes (the last result of a window is its final total).

Writes to `out-count/`, `out-clock/`, `out-all/` and `out-early/`.

    python examples/windows_by_count_and_clock.py                           # from the repository root
    epochal run --executor inprocess examples/windows_by_count_and_clock.py
"""

import time

from epochal import AggregateFunction, CheckpointConfig, StreamEnvironment, WatermarkStrategy
from epochal.connectors import FileSink
from epochal.testing import ListSource
from epochal.windows import EventTimeTrigger, Tumbling

READINGS = [{"sensor": f"s{i % 3}", "t": i * 0.5, "value": (i * 37) % 100} for i in range(600)]


class Mean(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value["value"], acc[1] + 1)

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def get_result(self, acc):
        return acc[0] / acc[1]


def paced(reading):
    time.sleep(0.002)  # the readings arrive over about a second of processing time
    return reading


if __name__ == "__main__":
    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=0.5, directory="ckpt-windows", existing="overwrite"))
    readings = env.from_source(ListSource(READINGS), watermarks=WatermarkStrategy.for_monotonous_timestamps(
        timestamp="t")).map(paced)
    by_sensor = readings.key_by("sensor")
    by_sensor.count_window(5).aggregate(Mean()).sink_to(FileSink("out-count/", mode="overwrite"), name="count")
    by_sensor.window(Tumbling(0.5), time="processing").count().sink_to(
        FileSink("out-clock/", mode="overwrite"), name="clock")
    readings.window_all(Tumbling(60)).max("value").sink_to(FileSink("out-all/", mode="overwrite"), name="all")
    by_sensor.window(Tumbling(60), trigger=EventTimeTrigger().with_early_firings(every=0.2)).sum("value").sink_to(
        FileSink("out-early/", mode="overwrite"), name="early")
    result = env.execute("windows")
    print(f"windows: {result.operator('count').records_in} count windows, "
          f"{result.operator('all').records_in} minutes over all sensors, {result.restarts} restart(s)")
