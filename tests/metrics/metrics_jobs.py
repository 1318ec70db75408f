"""Small jobs and HTTP helpers shared by the metrics tests."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from epochal import CheckpointConfig, Source, SplitReader, StreamEnvironment
from epochal.testing import CollectSink, ListSource


class _Split:
    def __init__(self, split_id: str) -> None:
        self.split_id = split_id


class Paced(Source):
    """`total` records (0, 1, 2, ...), `per_read` a read, `pause` seconds before each read; then,
    unless it `ends`, nothing: an unbounded source with nothing more to say, so the job runs (and
    checkpoints) until it is cancelled."""

    def __init__(self, total: int, per_read: int = 100, pause: float = 0.0, ends: bool = False) -> None:
        self.total, self.per_read, self.pause, self.ends = total, per_read, pause, ends

    def splits(self) -> list[Any]:
        return [_Split("paced")]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _PacedReader(self, position or 0)


class _PacedReader(SplitReader):
    def __init__(self, source: Paced, position: int) -> None:
        self.source, self.next = source, position

    def read(self, max_records: int) -> list[int] | None:
        if self.next >= self.source.total:
            if self.source.ends:
                return None
            time.sleep(0.002)  # nothing more: do not spin
            return []
        if self.source.pause:
            time.sleep(self.source.pause)
        end = min(self.source.total, self.next + min(max_records, self.source.per_read))
        batch, self.next = list(range(self.next, end)), end
        return batch

    def position(self) -> int:
        return self.next


def word_count(env: StreamEnvironment, source: Source) -> CollectSink:
    """source -> map -> key_by -> reduce -> sink: two tasks per subtask, a keyed shuffle, state."""
    sink = CollectSink()
    (env.from_source(source, name="numbers")
        .map(lambda x: (x % 10, 1), name="pair")
        .key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1]), name="count")
        .sink_to(sink, name="out"))
    return sink


def bounded_env(directory: str, parallelism: int = 2, interval: float = 0.01) -> StreamEnvironment:
    return StreamEnvironment(
        parallelism, executor="inprocess", batch_size=64,
        checkpoint=CheckpointConfig(interval=interval, directory=directory, retain=1_000_000),
    )


def finite(n: int) -> ListSource:
    return ListSource(list(range(n)), splits=2, batch_size=50)


def slow_finite(n: int) -> Paced:
    """`n` records over at least `n / 50` ms: a job at a 10 ms interval checkpoints several times."""
    return Paced(n, per_read=100, pause=0.002, ends=True)


def get(url: str, timeout: float = 5.0) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.headers.get("Content-Type", ""), response.read()


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """`GET url/metrics`, parsed by Prometheus's own parser: sample name -> [(labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families

    _, _, body = get(url.rstrip("/") + "/metrics")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    return sum(v for ls, v in samples.get(name, []) if all(ls.get(k) == x for k, x in labels.items()))


def metrics_json(url: str) -> dict[str, Any]:
    _, _, body = get(url.rstrip("/") + "/metrics.json")
    loaded: dict[str, Any] = json.loads(body)
    return loaded


def wait_for(condition: Callable[[], Any], timeout: float = 60.0, what: str = "a condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
