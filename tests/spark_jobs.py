"""Jobs shared by the Spark integration and fault tests (importable by worker processes too)."""

from __future__ import annotations

import collections
import os
import random
import time

from epochal import CheckpointConfig, RestartStrategy, StreamEnvironment
from epochal.connectors import FileSink, TextFileSource


def write_corpus(directory: str, files: int = 4, lines: int = 1500, seed: int = 7) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    os.makedirs(directory, exist_ok=True)
    for f in range(files):
        with open(os.path.join(directory, f"f{f}.txt"), "w") as out:
            for _ in range(lines):
                out.write(" ".join(rng.choice(words) for _ in range(6)) + "\n")


def expected_updates(directory: str) -> list[tuple[str, int]]:
    """Every `(word, n)` a running count emits: n = 1..count(word)."""
    counts: collections.Counter[str] = collections.Counter()
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            for line in f:
                counts.update(line.split())
    return sorted((w, i) for w, n in counts.items() for i in range(1, n + 1))


def slow_split(line: str) -> list[str]:
    time.sleep(0.002)  # stretch the job (about 6 s) so that a kill lands mid-stream
    return line.split()


def wordcount_env(
    corpus: str, out: str, ckpt: str, *, parallelism: int = 2, interval: float = 0.3, spark=None,
    executor: str = "spark", slow: bool = True, restarts: int = 3, batch_size: int = 64,
) -> StreamEnvironment:
    env = StreamEnvironment(
        parallelism=parallelism,
        executor=executor,  # type: ignore[arg-type]
        spark=spark,
        checkpoint=CheckpointConfig(interval=interval, directory=ckpt),
        restart=RestartStrategy(max_restarts=restarts),
        batch_size=batch_size,  # small batches: a barrier never waits long behind a slow one
    )
    (
        env.from_source(TextFileSource(corpus))
        .flat_map(slow_split if slow else str.split)
        .key_by(lambda w: w)
        .count()
        .sink_to(FileSink(out))
    )
    return env


def components_env(out: str, ckpt: str, *, spark=None, slow: float = 0.0, seed: int = 7,
                   vertices: int = 200, edges: int = 260, fail_marker: str | None = None,
                   fail_after: int = 0) -> StreamEnvironment:
    """The connected-components example's loop, optionally slowed down, or failing once, inside."""
    import connected_components as cc

    env = StreamEnvironment(
        parallelism=2, spark=spark, batch_size=16,
        checkpoint=CheckpointConfig(interval=0.2, directory=ckpt),
        restart=RestartStrategy(max_restarts=3),
    )
    original = cc.PropagateLabels.process_element

    class SlowPropagate(cc.PropagateLabels):
        calls = 0

        def process_element(self, message, ctx):
            if slow:
                time.sleep(slow)
            SlowPropagate.calls += 1
            if fail_marker and SlowPropagate.calls == fail_after and not os.path.exists(fail_marker):
                open(fail_marker, "w").close()
                raise ValueError("injected failure inside the loop")
            return original(self, message, ctx)

    from epochal.testing import ListSource

    graph = cc.random_graph(vertices, edges, seed)

    def body(loop):
        tagged = loop.key_by(lambda m: m[1]).process(SlowPropagate(), name="propagate")
        feedback = tagged.filter(lambda t: t[0] == "feedback").map(lambda t: t[1])
        output = tagged.filter(lambda t: t[0] == "out").map(lambda t: t[1])
        return feedback, output

    (
        env.from_source(ListSource(graph, splits=2))
        .flat_map(lambda e: [("edge", e[0], e[1]), ("edge", e[1], e[0])])
        .iterate(body, name="loop")
        .sink_to(FileSink(out))
    )
    return env
