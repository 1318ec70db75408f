"""Word count, exactly once: the program of the quick start.

Counts words in `corpus/` (a small demo corpus is written there if it does not exist) and writes
a running `(word, count)` per occurrence to `out/`, committing once per checkpoint. Runs on the
embedded local Spark; `executor="inprocess"` runs it in this process instead.

    python examples/wordcount.py            # from the repository root
    epochal run examples/wordcount.py --parallelism 2

Every run of the demo starts over: `existing="overwrite"` deletes the checkpoints of the last run
and `mode="overwrite"` its `part-*` files, so `out/` always holds one run's output. A job of
your own keeps the defaults, which refuse to start over an earlier run's checkpoints or output
and say how to resume it (`epochal run examples/wordcount.py --from-checkpoint latest` resumes
this one; a resumed run keeps its output). See docs/operations.md, "Starting, resuming,
starting over".
"""

import os
import random

from epochal import CheckpointConfig, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource


def write_demo_corpus(directory: str, files: int = 4, lines: int = 2_000) -> None:
    """A reproducible corpus: Zipf-like word frequencies, like real text."""
    rng = random.Random(42)
    vocabulary = [f"word{i}" for i in range(2_000)]
    weights = [1 / (i + 1) for i in range(len(vocabulary))]
    os.makedirs(directory, exist_ok=True)
    for f in range(files):
        with open(os.path.join(directory, f"part-{f}.txt"), "w") as out:
            for _ in range(lines):
                out.write(" ".join(rng.choices(vocabulary, weights, k=12)) + "\n")


if __name__ == "__main__":
    if not os.path.exists("corpus"):
        write_demo_corpus("corpus")

    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=1.0, directory="ckpt", existing="overwrite"))
    counts = (env.from_source(TextFileSource("corpus/"))  # a file or a directory of text files; replayable
                 .flat_map(str.split)
                 .key_by(lambda w: w)
                 .count())                                  # running count per key: emits (key, count)
    counts.sink_to(FileSink("out/", mode="overwrite"))      # exactly-once; replaces the last run's output
    result = env.execute("wordcount")

    print(f"wordcount: {result.operator('sink').records_in:,} updates committed to out/, "
          f"{len(result.checkpoints)} checkpoint(s), {result.restarts} restart(s)")
