"""The measuring sink of the elasticity benchmarks (issue 18): latency, and each key group's gaps.

Issue 18's targets are about two things a benchmark must see: the worst latency (sink time − the
record's due time) and whether any *key group* goes more than 100 ms without output while its
groups move. A worst latency per 250 ms cannot show the second: a moving group may stop while the
others go on. So each writer keeps, per 250 ms bucket of sink time:

- the latency: records, worst, sum (the worst of a batch is its oldest record's);
- per key group seen in the bucket: its first and last output time and the longest stretch
  between two of its outputs inside the bucket (`time.time()`, sub-millisecond).

A gap across buckets, or across writers (a moved group's output goes from its old owner's writer
to its new owner's), is found when the buckets are merged: the stretch from one output of the
group to its next, whichever writer wrote them. A writer appends its current bucket to its own
JSON-lines file every `FLUSH` seconds of output (a later line of the same bucket replaces the
earlier), so a SIGKILLed worker loses at most `FLUSH` seconds of what it measured. The sink is
not transactional: output replayed after a restore is measured again, as a reader would see it.

Records are `(key, _, x)` tuples of `soak`'s paced sequence: `x // SPLITS` is the record's index,
due at `start + index / rate`.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from epochal.api.connector import Sink, SinkWriter
from epochal.state.keygroups import key_group_of

from . import soak

BUCKET = 0.25  # seconds of sink time per bucket
FLUSH = 0.05  # seconds of sink time between a writer's appends of its current bucket


class _Writer(SinkWriter):
    def __init__(self, directory: str, subtask: int, start: float, rate: float) -> None:
        self.created = time.time()
        self.path = os.path.join(directory, f"out-{os.getpid()}-{subtask}-{time.monotonic_ns()}.jsonl")
        self.subtask, self.start, self.rate = subtask, start, rate
        self.groups: dict[Any, int] = {}  # key → its key group, as keys come
        self.bucket = -1
        self.latency = [0, 0.0, 0.0]  # records, worst, sum of latencies in the bucket
        self.seen: dict[int, list[float]] = {}  # key group → [first, last, longest gap] in the bucket
        self.flushed = 0.0
        with open(self.path, "a") as f:
            f.write(json.dumps({"created": self.created, "subtask": subtask}) + "\n")

    def write(self, batch: Any) -> None:
        if not isinstance(batch, list):
            batch = batch.to_pylist() if hasattr(batch, "to_pylist") else list(batch)
        if not batch:
            return
        now = time.time()
        b = int((now - self.start) / BUCKET)
        if b != self.bucket:
            self._flush()
            self.bucket, self.latency, self.seen = b, [0, 0.0, 0.0], {}
        xs = [record[2] for record in batch]
        due = self.start + min(xs) / soak.SPLITS / self.rate
        lat = self.latency
        lat[0] += len(xs)
        lat[1] = max(lat[1], now - due)
        lat[2] += len(xs) * (now - self.start) - sum(xs) / soak.SPLITS / self.rate
        groups = self.groups
        for key in {record[0] for record in batch}:
            group = groups.get(key)
            if group is None:
                group = groups[key] = key_group_of(key)
            seen = self.seen.get(group)
            if seen is None:
                self.seen[group] = [now, now, 0.0]
            else:
                if now - seen[1] > seen[2]:
                    seen[2] = now - seen[1]
                seen[1] = now
        if now - self.flushed >= FLUSH:
            self._flush()

    def _flush(self) -> None:
        if self.bucket < 0:
            return
        self.flushed = time.time()
        line = {"b": self.bucket, "lat": self.latency, "g": self.seen}
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")

    def prepare_commit(self, checkpoint_id: int) -> Any:
        self._flush()
        return None

    def close(self) -> None:
        self._flush()


class MeasuringSink(Sink):
    """Latency and key-group output times of `soak`'s paced records, due from `start` at `rate`
    records/s, into JSON-lines files in `directory` (`read` merges them)."""

    def __init__(self, directory: str, start: float, rate: float) -> None:
        self.directory, self.start, self.rate = directory, start, rate

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _Writer(self.directory, subtask, self.start, self.rate)


@dataclass(frozen=True, slots=True)
class Span:
    """A key group's output in one bucket of one writer: first and last output, longest gap inside."""

    first: float
    last: float
    inner_gap: float
    subtask: int


@dataclass(slots=True)
class Measured:
    """What every writer measured, merged; times are seconds since the sink's `start`."""

    latency: list[tuple[float, int, float, float | None]]  # (bucket start, records, worst, mean)
    spans: dict[int, list[Span]] = field(default_factory=dict)  # key group → its spans, by first output
    writers: list[tuple[float, int]] = field(default_factory=list)  # (created, subtask)
    written: dict[int, dict[int, int]] = field(default_factory=dict)  # subtask → bucket → records it wrote

    def records(self, subtask: int, since: float, until: float) -> int:
        """Records subtask `subtask`'s writers wrote in the buckets that start in `[since, until)`."""
        return sum(n for b, n in self.written.get(subtask, {}).items() if since <= b * BUCKET < until)

    def worst_latency(self, since: float, until: float) -> float | None:
        """The worst latency of the buckets in `[since, until)`."""
        return max((worst for t, n, worst, _ in self.latency if n and since <= t < until), default=None)

    def gaps(self, since: float, until: float, ended: bool = False) -> dict[int, float]:
        """Per key group, its longest stretch without output that overlaps `[since, until)`: from
        one output to its next (in any writer), or inside a bucket. A group without output in the
        whole window has a gap as long as the window (at least). `ended`: only stretches that ended
        in the window (a steady window's, whose end a change or a kill may cut into)."""
        out: dict[int, float] = {}
        for group, spans in self.spans.items():
            worst, previous = 0.0, None
            for span in spans:
                if (previous is not None and span.first > previous and span.first > since and previous < until
                        and (not ended or span.first < until)):
                    worst = max(worst, span.first - previous)
                if span.first < until and span.last > since:
                    worst = max(worst, span.inner_gap)
                previous = span.last if previous is None else max(previous, span.last)
            if not ended and previous is not None and previous < until:  # silent from its last output on
                worst = max(worst, until - previous)
            out[group] = worst
        return out

    def output_after(self, moment: float) -> dict[int, float | None]:
        """Per key group, seconds from `moment` to its first output after it (None: none): how long
        a group stayed silent from a kill on. A span that straddles `moment` counts as output at it."""
        out: dict[int, float | None] = {}
        for group, spans in self.spans.items():
            after = [max(span.first, moment) for span in spans if span.last > moment]
            out[group] = min(after) - moment if after else None
        return out

    def gap_series(self) -> list[tuple[float, float]]:
        """(bucket start, the longest gap of any key group that ended in the bucket), in time order."""
        worst: dict[int, float] = {}

        def note(end: float, gap: float) -> None:
            b = int(end // BUCKET)
            worst[b] = max(worst.get(b, 0.0), gap)

        for spans in self.spans.values():
            previous = None
            for span in spans:
                if previous is not None and span.first > previous:
                    note(span.first, span.first - previous)
                note(span.last, span.inner_gap)
                previous = span.last if previous is None else max(previous, span.last)
        return sorted((b * BUCKET, gap) for b, gap in worst.items())

    def groups_of(self, subtask: int, since: float, until: float) -> set[int]:
        """The key groups that subtask `subtask`'s writers wrote in `[since, until)`."""
        return {group for group, spans in self.spans.items()
                if any(s.subtask == subtask and s.first < until and s.last >= since for s in spans)}


def read(directory: str) -> Measured:
    """Merge the writers' files in `directory`."""
    latency: dict[int, list[float]] = {}
    spans: dict[int, list[Span]] = {}
    writers = []
    written: dict[int, dict[int, int]] = {}
    for path in glob.glob(os.path.join(directory, "out-*.jsonl")):
        buckets: dict[int, dict[str, Any]] = {}
        subtask = -1
        with open(path) as f:
            for text in f:
                try:
                    line = json.loads(text)
                except ValueError:  # a line cut short by a kill
                    continue
                if "created" in line:
                    writers.append((line["created"], line["subtask"]))
                    subtask = line["subtask"]
                else:
                    buckets[line["b"]] = line  # the last line of a bucket holds it all
        for b, line in buckets.items():
            n, worst, total = line["lat"]
            mine = written.setdefault(subtask, {})
            mine[b] = mine.get(b, 0) + int(n)
            acc = latency.setdefault(b, [0, 0.0, 0.0])
            acc[0] += n
            acc[1] = max(acc[1], worst)
            acc[2] += total
            for group, (first, last, inner) in line["g"].items():
                spans.setdefault(int(group), []).append(Span(first, last, inner, subtask))
    merged = sorted((b * BUCKET, int(n), worst, total / n if n else None) for b, (n, worst, total) in latency.items())
    return Measured(merged, {g: sorted(s, key=lambda span: span.first) for g, s in spans.items()}, sorted(writers),
                    written)


def relative(measured: Measured, start: float) -> Measured:
    """`measured` with its output times and writers' creation as seconds since `start`."""
    spans = {g: [Span(s.first - start, s.last - start, s.inner_gap, s.subtask) for s in ss]
             for g, ss in measured.spans.items()}
    return Measured(measured.latency, spans, [(c - start, s) for c, s in measured.writers], measured.written)


def load(directory: str, start: float) -> Measured:
    """`read` with times relative to `start`, the sink's own."""
    return relative(read(directory), start)


def wait_for_new_output(directory: str, since: float, timeout: float = 600.0) -> None:
    """Return once a writer created after wall-clock `since` wrote output into `directory`: a job
    restored after a stop writes again."""
    deadline, old = time.monotonic() + timeout, set()
    while time.monotonic() < deadline:
        for path in glob.glob(os.path.join(directory, "out-*.jsonl")):
            if path in old:
                continue
            with open(path) as f:
                header, more = f.readline(), f.readline()
            try:
                created = json.loads(header)["created"]
            except (ValueError, KeyError):
                continue  # being written
            if created <= since:
                old.add(path)
            elif more:
                return
        time.sleep(0.02)
    raise TimeoutError(f"no output in {directory} from a writer made after the stop, in {timeout:.0f} s")


def recent_latency(directory: str, start: float, seconds: float = 1.0, tail: int = 1 << 18) -> float | None:
    """The worst latency the writers measured in the last `seconds` of sink time, from the tails of
    their files (cheap enough to ask twice a second while a job runs); None without output."""
    since = int((time.time() - start - seconds) / BUCKET)
    worst_seen = None
    for path in glob.glob(os.path.join(directory, "out-*.jsonl")):
        if os.path.getmtime(path) < time.time() - seconds - 1.0:
            continue
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - tail))
            lines = f.read().split(b"\n")[1:]
        for text in lines:
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if line.get("b", -1) >= since and line["lat"][0]:
                worst_seen = max(worst_seen or 0.0, line["lat"][1])
    return worst_seen


def worst(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)
