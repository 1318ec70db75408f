"""Streaming connected components: labels fed back round a loop until they are stable.

Each vertex's label is the smallest vertex id known to be connected to it. An edge tells both of
its vertices about each other; a vertex whose label drops tells all its neighbours, through the
loop's feedback edge, until no label changes. The output is every label change; the last (and
smallest) label per vertex is its component. Checkpoints stay exactly-once inside the loop: the
loop head logs the feedback in flight while a barrier goes round (ABS §4.3, Algorithm 2).

    python examples/connected_components.py
    epochal run examples/connected_components.py --executor inprocess
"""

import json
import os
import random

from epochal import CheckpointConfig, KeyedProcessFunction, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.testing import ListSource


class PropagateLabels(KeyedProcessFunction):
    """Keyed by vertex: keeps its label and neighbours; emits ("out", …) and ("feedback", …)."""

    def open(self, ctx):
        self.label = ctx.value_state("label")
        self.neighbours = ctx.list_state("neighbours")

    def process_element(self, message, ctx):
        kind, vertex, other = message
        current = self.label.value()
        if kind == "edge":
            if current is None:
                current = vertex
                self.label.update(current)
                yield ("out", (vertex, current))
            self.neighbours.add(other)
            yield ("feedback", ("label", other, current))
        elif current is None or other < current:  # a smaller label from a neighbour
            self.label.update(other)
            yield ("out", (vertex, other))
            for neighbour in self.neighbours.get():
                yield ("feedback", ("label", neighbour, other))


def components(env, edges, out, mode="error"):
    """Wire the loop: edges in, label changes out (to a FileSink in `mode`)."""

    def body(loop):
        tagged = loop.key_by(lambda m: m[1]).process(PropagateLabels(), name="propagate")
        feedback = tagged.filter(lambda t: t[0] == "feedback", name="feedback").map(
            lambda t: t[1], name="unwrap-feedback"
        )
        output = tagged.filter(lambda t: t[0] == "out", name="changes").map(lambda t: t[1], name="unwrap-changes")
        return feedback, output

    messages = env.from_source(edges).flat_map(
        lambda e: [("edge", e[0], e[1]), ("edge", e[1], e[0])], name="both-directions"
    )
    messages.iterate(body, name="loop").sink_to(FileSink(out, mode=mode))


def random_graph(vertices=300, edges=400, seed=7):
    rng = random.Random(seed)
    return [(rng.randrange(vertices), rng.randrange(vertices)) for _ in range(edges)]


def final_labels(records):
    labels = {}
    for vertex, label in records:
        labels[vertex] = min(label, labels.get(vertex, label))
    return labels


if __name__ == "__main__":
    # every run starts over: the last run's checkpoints and output are replaced
    env = StreamEnvironment(parallelism=2, checkpoint=CheckpointConfig(interval=0.5, directory="ckpt-components",
                                                                       existing="overwrite"))
    components(env, ListSource(random_graph(), splits=2), "out-components", mode="overwrite")
    env.execute("connected-components")
    labels = final_labels(tuple(r) for r in read_committed("out-components"))
    sizes = {}
    for label in labels.values():
        sizes[label] = sizes.get(label, 0) + 1
    biggest = sorted(sizes.values(), reverse=True)[:3]
    print(f"connected components: {len(labels)} vertices in {len(sizes)} components; largest {biggest}")
    with open(os.path.join("out-components", "_labels.json"), "w") as f:
        json.dump({str(k): v for k, v in sorted(labels.items())}, f)
