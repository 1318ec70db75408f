"""Sessions by inactivity, with keyed state and processing-time timers.

A session of a user ends when no event of that user arrived for `GAP` seconds; the job then
emits `(user, events in the session)`. `SessionCounter` keeps the count and the pending timer in
keyed state and moves the timer forward on every event, so exactly one timer per user is due.

Processing time is the wall clock, so the events must be *spread out in time* for sessions to
end: `ClickScript` is a small replayable source that releases each event at its offset in a
script (measured from when its reader opens) and, after the last event, keeps its input open for
`LINGER` seconds. That last part matters: by default, processing-time timers still pending when
the input ends do not fire (they are handed to `on_end_of_input`, unfired), so without the linger
the last session of every user would be emitted only with `process(..., timers_at_end="fire")`,
which fires them at the end of the input, as if the clock had reached them. Sessions on *event
time* need none of this: the end of input moves the watermark to the end of time and every
session fires (`examples/sessions_event_time.py`, with `Session(gap)` windows).

Writes `(user, count)` per session to `out-sessions/`, checkpointing into `ckpt-sessions/`.
The run takes about 7 seconds (plus Spark start-up).

    python examples/sessions_with_timers.py                           # from the repository root
    epochal run --executor inprocess examples/sessions_with_timers.py
"""

import time
from dataclasses import dataclass

from epochal import CheckpointConfig, KeyedProcessFunction, Source, SplitReader, StreamEnvironment
from epochal.connectors import FileSink

GAP = 1.0     # seconds of inactivity that end a session
LINGER = 2.0  # seconds the input stays open after the last event (> GAP: the last timers fire)

# (seconds after the start, user). Events of one session are at most 0.4 s apart; sessions of
# one user at least 2 s apart, so a scheduling hiccup well under GAP changes nothing.
SCRIPT = [
    (0.0, "alice"), (0.2, "alice"), (0.3, "bob"), (0.4, "alice"),
    (1.0, "carol"), (1.3, "carol"),
    (3.0, "alice"), (3.1, "bob"), (3.2, "bob"), (3.4, "alice"), (3.6, "bob"),
    (5.0, "carol"),
]
EXPECTED = [("alice", 3), ("bob", 1), ("carol", 2), ("alice", 2), ("bob", 3), ("carol", 1)]


@dataclass(frozen=True)
class ScriptSplit:
    split_id: str


class _ScriptReader(SplitReader):
    def __init__(self, script, position, linger):
        self.script = script
        self.index = position or 0  # position: index of the next event to hand out
        self.linger = linger
        self.opened = time.time()
        # A restored reader replays the script from `index` with the same spacing.
        self.offset = script[self.index][0] if self.index < len(script) else script[-1][0]

    def _due(self, index):
        return self.opened + self.script[index][0] - self.offset

    def read(self, max_records):
        now = time.time()
        out = []
        while self.index < len(self.script) and len(out) < max_records and self._due(self.index) <= now:
            out.append({"user": self.script[self.index][1], "at": self.script[self.index][0]})
            self.index += 1
        if out:
            return out
        if self.index >= len(self.script):
            end = self._due(len(self.script) - 1) + self.linger
            if now >= end:
                return None  # the split ends: no more events
            wait = end - now
        else:
            wait = self._due(self.index) - now
        time.sleep(min(wait, 0.005))  # nothing due yet: an empty batch, and do not spin
        return []

    def position(self):
        return self.index


class ClickScript(Source):
    """Releases `script` events in real time: one split, replayable by event index."""

    def __init__(self, script, linger):
        self.script = list(script)
        self.linger = linger

    def splits(self):
        return [ScriptSplit("script")]

    def open_split(self, split, position):
        return _ScriptReader(self.script, position, self.linger)


class SessionCounter(KeyedProcessFunction):
    """Counts a user's events; emits `(user, count)` once the user was quiet for `gap` seconds."""

    def __init__(self, gap):
        self.gap = gap

    def open(self, ctx):
        self.count = ctx.value_state("count", default=0)
        self.timer = ctx.value_state("timer")  # the pending timer's timestamp, if any

    def process_element(self, event, ctx):
        self.count.update(self.count.value() + 1)
        if self.timer.value() is not None:
            ctx.delete_processing_time_timer(self.timer.value())
        deadline = ctx.current_processing_time() + self.gap
        ctx.register_processing_time_timer(deadline)
        self.timer.update(deadline)

    def on_timer(self, timestamp, ctx):
        count = self.count.value()
        self.count.clear()
        self.timer.clear()
        yield (ctx.key, count)


if __name__ == "__main__":
    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=1.0, directory="ckpt-sessions",
                                                        existing="overwrite"))  # every run starts over
    (env.from_source(ClickScript(SCRIPT, LINGER)).set_parallelism(1)  # one split: one reader
        .key_by("user")                        # a dict record: keyed by its "user" item
        .process(SessionCounter(GAP))
        .sink_to(FileSink("out-sessions/", mode="overwrite")))
    result = env.execute("sessions")

    print(f"sessions: {result.operator('sink').records_in} sessions committed to out-sessions/ "
          f"(expected {len(EXPECTED)}), {len(result.checkpoints)} checkpoint(s), "
          f"{result.restarts} restart(s)")
