"""Sources, sinks and programs shared by the benchmarks.

Spark workers cannot import the `benchmarks` package, so `ship()` registers this module to be
pickled by value (as `startup_recovery` does): everything a job needs at run time lives here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from epochal.api.connector import Sink, SinkWriter, Source, SplitReader

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def ship() -> None:
    """Let Spark workers unpickle this module's classes and functions without importing it."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def mix(index: np.ndarray) -> np.ndarray:
    """splitmix64 of each index: a deterministic, well-spread hash (record i is always the same)."""
    with np.errstate(over="ignore"):
        z = index.astype(np.uint64) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


# -- the ABS evaluation's generator source ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RangeSplit:
    split_id: str
    start: int
    end: int


class _GeneratorReader(SplitReader):
    def __init__(self, split: RangeSplit, position: int | None, keys: int, arrow: bool) -> None:
        self.split = split
        self.pos = split.start if position is None else position
        self.keys = keys
        self.arrow = arrow

    def read(self, max_records: int) -> Any:
        if self.pos >= self.split.end:
            return None
        stop = min(self.split.end, self.pos + max_records)
        index = np.arange(self.pos, stop, dtype=np.uint64)
        self.pos = stop
        key = (mix(index) % np.uint64(self.keys)).astype(np.int64)
        value = (index & np.uint64(0xFF)).astype(np.int64)
        if self.arrow:
            return pa.RecordBatch.from_arrays([pa.array(key), pa.array(value)], names=["key", "value"])
        return list(zip(key.tolist(), value.tolist()))

    def position(self) -> int:
        return self.pos


class GeneratorSource(Source):
    """`records` records `(key, value)`, record i the same on every run, spread evenly over `splits`.

    The position of a split is the index of its next record, so the source is replayable: its
    state is one offset per split (the paper's "source offsets"). `arrow=True` emits Arrow
    batches with columns `key` and `value` instead of lists of tuples.
    """

    def __init__(self, records: int, splits: int, keys: int, arrow: bool = False) -> None:
        self.records = records
        self.n_splits = splits
        self.keys = keys
        self.arrow = arrow

    def splits(self) -> Sequence[RangeSplit]:
        n, s = self.records, self.n_splits
        return [RangeSplit(f"gen-{i}", i * n // s, (i + 1) * n // s) for i in range(s)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _GeneratorReader(split, position, self.keys, self.arrow)


class _PacedReader(_GeneratorReader):
    """A `_GeneratorReader` that hands out at most `rate` records a second, without blocking:
    between reads it asks to be polled again when its next batch is due (`retry_after`)."""

    def __init__(self, split: RangeSplit, position: int | None, keys: int, rate: float) -> None:
        super().__init__(split, position, keys, False)
        self.rate = rate
        self.started = -1.0
        self.first = self.pos

    def _due(self) -> float:
        """When the record at `pos` is due (the pace is kept from the first read on)."""
        return self.started + (self.pos - self.first) / self.rate

    def read(self, max_records: int) -> Any:
        import time

        if self.pos >= self.split.end:
            return None
        now = time.monotonic()
        if self.started < 0:
            self.started = now
        due = int((now - self.started) * self.rate) + self.first - self.pos
        if due <= 0:
            return []
        return super().read(min(max_records, due))

    def retry_after(self) -> float:
        import time

        return max(0.001, self._due() + 1 / self.rate - time.monotonic())


class PacedSource(GeneratorSource):
    """`GeneratorSource`'s records, `rate` a second in all (each split its share), never
    blocking a worker: slow input, so that what a run measures is the cost of running wide,
    not the cores."""

    def __init__(self, records: int, splits: int, keys: int, rate: float) -> None:
        super().__init__(records, splits, keys)
        self.rate = rate

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _PacedReader(split, position, self.keys, self.rate / self.n_splits)


# -- the word count's in-memory corpus --------------------------------------------------------------


def make_corpus(words: int, vocabulary: int = 20_000, words_per_line: int = 8, seed: int = 11) -> pa.Array:
    """Lines of `words_per_line` words drawn (Zipf-like) from `vocabulary` words, as Arrow strings."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i:05d}" for i in range(vocabulary)], dtype=object)
    ranks = np.minimum(rng.zipf(1.2, size=words) - 1, vocabulary - 1)
    drawn = vocab[ranks]
    lines = [" ".join(drawn[i : i + words_per_line]) for i in range(0, words, words_per_line)]
    return pa.array(lines, pa.string())


@dataclass(frozen=True, slots=True)
class SliceSplit:
    split_id: str
    start: int
    end: int


class _CorpusReader(SplitReader):
    def __init__(self, lines: pa.Array, split: SliceSplit, position: int | None, arrow: bool) -> None:
        self.lines = lines
        self.split = split
        self.pos = split.start if position is None else position
        self.arrow = arrow

    def read(self, max_records: int) -> Any:
        if self.pos >= self.split.end:
            return None
        stop = min(self.split.end, self.pos + max_records)
        chunk = self.lines.slice(self.pos, stop - self.pos)
        self.pos = stop
        if self.arrow:
            return pa.RecordBatch.from_arrays([chunk], names=["line"])
        return chunk.to_pylist()

    def position(self) -> int:
        return self.pos


class CorpusSource(Source):
    """Lines of an in-memory corpus, in `splits` contiguous splits; Arrow batches or lists of str."""

    def __init__(self, lines: pa.Array, splits: int, arrow: bool) -> None:
        self.lines = lines
        self.n_splits = splits
        self.arrow = arrow

    def splits(self) -> Sequence[SliceSplit]:
        n, s = len(self.lines), self.n_splits
        return [SliceSplit(f"lines-{i}", i * n // s, (i + 1) * n // s) for i in range(s)]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _CorpusReader(self.lines, split, position, self.arrow)


def split_words(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The columnar word split: one row per word, column `word`."""
    words = pc.list_flatten(pc.utf8_split_whitespace(batch.column(0)))
    return pa.RecordBatch.from_arrays([words], names=["word"])


# Made at import, as every library's import is made before a benchmark's clock starts: pyarrow
# imports pandas (0.4-0.7 s here) the first time a Python value becomes an Arrow scalar.
_EMPTY = pa.scalar("", pa.string())


def split_on_spaces(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The word split polars' `str.split(" ")` does: one row per word on single spaces, no empties."""
    words = pc.list_flatten(pc.split_pattern(batch.column(0), " "))
    if pc.any(pc.equal(words, _EMPTY)).as_py():
        words = pc.filter(words, pc.not_equal(words, _EMPTY))
    return pa.RecordBatch.from_arrays([words], names=["word"])


def pyarrow_ceiling(lines: pa.Array) -> int:
    """Plain pyarrow split-and-count of the whole corpus (one core); returns the word total."""
    words = pc.list_flatten(pc.utf8_split_whitespace(lines))
    counts = pc.value_counts(words)
    return int(pc.sum(counts.field("counts")).as_py())


def polars_ceiling(lines: pa.Array) -> int | None:
    """The same count in polars, if polars is installed (it is not a dependency)."""
    try:
        import polars as pl
    except ImportError:
        return None
    s = pl.from_arrow(lines)
    counts = s.str.split(" ").explode().value_counts()
    return int(counts.get_column(counts.columns[-1]).sum())


# -- a sink that only counts --------------------------------------------------------------------------


class _NullWriter(SinkWriter):
    def __init__(self) -> None:
        self.records = 0

    def write(self, batch: Any) -> None:
        self.records += batch.num_rows if isinstance(batch, pa.RecordBatch) else len(batch)


class NullSink(Sink):
    """Discards its records (the job's operator metrics count them)."""

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _NullWriter()


# -- programs -----------------------------------------------------------------------------------------


def remap(record: tuple[int, int]) -> tuple[int, int]:
    """The map stage of the ABS topology: a new key from the old one."""
    key, value = record
    return ((key * 7919 + 13) % 1_000_003, value)


def add_values(acc: tuple[int, int], record: tuple[int, int]) -> tuple[int, int]:
    """A per-key running sum, keyed by the record's first field."""
    return (record[0], acc[1] + record[1])


def identity(word: str) -> str:
    return word


def first(record: tuple[int, int]) -> int:
    return record[0]


def rekey_a(record: tuple[int, int]) -> int:
    return (record[0] * 31 + record[1]) % 4099


def rekey_b(record: tuple[int, int]) -> int:
    return (record[0] * 17 + 5) % 4093
