"""Word count on the columnar path: the lines stay in Arrow from the source to the count.

The same job as `wordcount.py`, with the same committed output (the same multiset of running
`(word, count)` updates), written with `map_batches`: the split is two pyarrow.compute kernels
over a whole batch of lines instead of one Python call per line, and `key_by("word").count()`
counts a whole Arrow batch at once (vectorized, no Python object per word). Reads `corpus/`
(the demo corpus of `wordcount.py` is written there if it does not exist) and writes to
`out-columnar/`, checkpointing into `ckpt-columnar/`.

    python examples/columnar_wordcount.py                          # from the repository root
    epochal run --executor inprocess examples/columnar_wordcount.py

Like `wordcount.py`, every run starts over (`existing="overwrite"`, `mode="overwrite"`): the
output is one run's. `--from-checkpoint latest` resumes the last run instead.
"""

import os
import random

import pyarrow as pa
import pyarrow.compute as pc

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource


def write_demo_corpus(directory: str, files: int = 4, lines: int = 2_000) -> None:
    """The corpus of `wordcount.py`, byte for byte (same seed, same vocabulary)."""
    rng = random.Random(42)
    vocabulary = [f"word{i}" for i in range(2_000)]
    weights = [1 / (i + 1) for i in range(len(vocabulary))]
    os.makedirs(directory, exist_ok=True)
    for f in range(files):
        with open(os.path.join(directory, f"part-{f}.txt"), "w") as out:
            for _ in range(lines):
                out.write(" ".join(rng.choices(vocabulary, weights, k=12)) + "\n")


def split_words(lines: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of lines (column `line`) → a batch of words (column `word`), like `str.split`."""
    words = pc.list_flatten(pc.utf8_split_whitespace(lines.column("line")))
    words = pc.filter(words, pc.not_equal(words, ""))  # leading/trailing blanks and empty lines
    return pa.RecordBatch.from_arrays([words], names=["word"])


if __name__ == "__main__":
    if not os.path.exists("corpus"):
        write_demo_corpus("corpus")

    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=1.0, directory="ckpt-columnar",
                                                        existing="overwrite"))
    (env.from_source(TextFileSource("corpus/"))   # Arrow batches with one column, `line`
        .map_batches(split_words)                 # Arrow in, Arrow out
        .key_by("word")                           # a column name: routed by key group, vectorized
        .count()                                  # Arrow batches with columns `word`, `count`
        .sink_to(FileSink("out-columnar/", mode="overwrite")))  # a JSON line ["word", n] per update
    result = env.execute("columnar_wordcount")

    print(f"columnar_wordcount: {result.operator('sink').records_in:,} updates committed to "
          f"out-columnar/, {len(result.checkpoints)} checkpoint(s), {result.restarts} restart(s)")
