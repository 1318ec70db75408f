"""Nested loops: PageRank by pushing residuals, an inner loop per tolerance, an outer loop over tolerances.

PageRank as a fixed point reached by pushing (Gauss-Seidel-like, asynchronous): every vertex
starts with a residual of (1 - d) / N; a vertex whose residual is large enough adds it to its
rank and pushes d * residual / out-degree to each neighbour. The *inner* loop pushes at one
tolerance: a residual above it goes round (feedback), one below settles. The *outer* loop takes
what settled at tolerance k and feeds it back in at the finer tolerance k + 1, where small
residuals add up until they are worth pushing: a fixed point inside a fixed point (the
dissertation's structured loops, ch. 6, nested). What settles at the finest tolerance is the
approximation's error; `check` compares the ranks with a batch power iteration.

    python examples/nested_pagerank.py
"""

import os
import random

from epochal import CheckpointConfig, KeyedProcessFunction, StreamEnvironment
from epochal.connectors import FileSink, read_committed
from epochal.testing import ListSource

DAMPING = 0.85
TOLERANCES = (1e-2, 1e-3, 1e-4, 1e-5)  # one inner loop's fixed point per tolerance, coarse to fine


class Push(KeyedProcessFunction):
    """Keyed by vertex: keeps the residual per tolerance; emits ("push", ...), ("rank", ...) and
    ("settled", ...) records."""

    def __init__(self, out_edges):
        self.out_edges = out_edges

    def open(self, ctx):
        self.residual = ctx.map_state("residual")  # tolerance level -> residual not pushed yet

    def process_element(self, message, ctx):
        vertex, amount, level = message
        residual = (self.residual.get(level) or 0.0) + amount
        if residual <= TOLERANCES[level]:
            if level + 1 < len(TOLERANCES):  # too small here: the next, finer, tolerance takes it
                self.residual.remove(level)
                yield ("settled", (vertex, residual, level))
            else:  # the finest tolerance keeps it: the approximation's error
                self.residual.put(level, residual)
            return
        self.residual.remove(level)
        yield ("rank", (vertex, residual))
        share = DAMPING * residual / len(self.out_edges[vertex])
        for neighbour in self.out_edges[vertex]:
            yield ("push", (neighbour, share, level))


def pagerank(env, out_edges, out):
    """Wire the nested loops: initial residuals in, rank increments out."""
    vertices = sorted(out_edges)

    def inner(loop):  # one tolerance: push until every residual at it is below it
        pushed = loop.key_by(lambda m: m[0]).process(Push(out_edges), name="push")
        feedback = pushed.filter(lambda t: t[0] == "push", name="pushes").map(lambda t: t[1], name="unwrap-push")
        return feedback, pushed.filter(lambda t: t[0] != "push", name="left")

    def outer(loop):  # the tolerances: what settled at one goes round again at the next
        left = loop.iterate(inner, name="push-loop")
        finer = left.filter(lambda t: t[0] == "settled", name="settled").map(
            lambda t: (t[1][0], t[1][1], t[1][2] + 1), name="finer")
        return finer, left.filter(lambda t: t[0] == "rank", name="ranks").map(lambda t: t[1], name="unwrap-rank")

    start = [(v, (1 - DAMPING) / len(vertices), 0) for v in vertices]
    looped = env.from_source(ListSource(start, splits=2)).iterate(outer, name="tolerances")
    looped.sink_to(FileSink(out, mode="overwrite"))


def random_graph(vertices=100, edges=300, seed=7):
    """Out-edges per vertex; every vertex has at least one (no dangling vertices)."""
    rng = random.Random(seed)
    out = {v: [rng.randrange(vertices)] for v in range(vertices)}
    for _ in range(edges - vertices):
        out[rng.randrange(vertices)].append(rng.randrange(vertices))
    return out


def ranks(records):
    """The rank of each vertex: the sum of the residuals it pushed."""
    total = {}
    for vertex, amount in records:
        total[vertex] = total.get(vertex, 0.0) + amount
    return total


def power_iteration(out_edges, iterations=200):
    """The batch reference: PageRank by power iteration."""
    n = len(out_edges)
    rank = dict.fromkeys(out_edges, 1.0 / n)
    for _ in range(iterations):
        nxt = dict.fromkeys(out_edges, (1 - DAMPING) / n)
        for v, targets in out_edges.items():
            for u in targets:
                nxt[u] += DAMPING * rank[v] / len(targets)
        rank = nxt
    return rank


def check(computed, out_edges, tolerance=5e-3):
    """The largest difference to the batch reference, relative to the largest rank; and the
    ranks' total: 1 less what stayed below the finest tolerance (at most N x tolerance / (1 - d)),
    never more (a rank increment counted twice would show)."""
    reference = power_iteration(out_edges)
    total, lost_at_most = sum(computed.values()), len(out_edges) * TOLERANCES[-1] / (1 - DAMPING)
    assert 1 - lost_at_most <= total <= 1 + 1e-9, f"the ranks add up to {total}"
    top = max(reference.values())
    worst = max(abs(computed.get(v, 0.0) - r) for v, r in reference.items()) / top
    assert worst <= tolerance, f"ranks differ from power iteration by {worst:.2e} of the largest rank"
    return worst


if __name__ == "__main__":
    graph = random_graph()
    env = StreamEnvironment(
        parallelism=2, checkpoint=CheckpointConfig(interval=0.5, directory="ckpt-pagerank", existing="overwrite")
    )
    pagerank(env, graph, "out-pagerank")
    env.execute("nested-pagerank")
    computed = ranks(tuple(r) for r in read_committed("out-pagerank"))
    worst = check(computed, graph)
    best = sorted(computed.items(), key=lambda kv: -kv[1])[:3]
    print(f"pagerank of {len(computed)} vertices; within {worst:.1e} of power iteration; top {best}")
    with open(os.path.join("out-pagerank", "_ranks.txt"), "w") as f:
        f.writelines(f"{v} {r:.8f}\n" for v, r in sorted(computed.items()))
