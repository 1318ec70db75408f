"""The key exchange: what a record costs to cross from one worker to another, and how many cross.

Two parts, in-process (no Spark, so the machine's noise is the only noise):

1. **A hop**: batches of the word count's shapes (Arrow words, pickled word lists, the local
   phase's partials) go through a `RemoteOutputChannel` → `Link` → loopback TCP → `Link` →
   `RemoteInputChannel`, as between two Spark workers. CPU time per 1,000 rows (both ends, one
   thread), bytes on the wire per row, and the copies an Arrow batch takes, counted by design.
2. **What crosses**: the word count of the `wordcount` benchmark's corpus, parallelism 2, per
   record and columnar, with and without a local phase before the exchange: rows and bytes per
   word that the key exchange carries (each batch encoded as it would be for the wire).
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
from typing import Any

from .runner import benchmark

HOP_ROWS = 200_000
# An Arrow batch between two workers, before: IPC write, to_pybytes, appended to the send buffer,
# the send buffer's memmove after a partial send, appended to the receive buffer, sliced twice
# (bytearray slice, bytes), the receive buffer's memmove. Now: the IPC write; the rest are views.
COPIES = {"before": 6, "now": 1}


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    return a, b


def _shapes(words: Any) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    batch = pa.RecordBatch.from_arrays([words], names=["word"])
    counts = pc.value_counts(words)
    partials = pa.RecordBatch.from_arrays([counts.field("values"), pc.cast(counts.field("counts"), pa.int64())],
                                          names=["word", "count"])
    return {
        "Arrow words (8k rows a batch)": [batch.slice(i, 8192) for i in range(0, len(batch), 8192)],
        "pickled words (1k records a batch)": [words.slice(i, 1024).to_pylist() for i in range(0, len(words), 1024)],
        "local phase's partials (word, count)": [partials],
    }


def hop(batches: list[Any]) -> dict[str, float]:
    """Send `batches` through a remote channel pair; CPU seconds per row and bytes per row."""
    from epochal.runtime.wire.network import Link, RemoteInputChannel, RemoteOutputChannel

    a, b = _tcp_pair()
    left, right = Link(a, "left"), Link(b, "right")
    out = RemoteOutputChannel(left, 0, 0, capacity=1 << 30, batch_size=1, flush_interval=0.0)
    inp = RemoteInputChannel(right, 0, 0, capacity=1 << 30)
    rows = sum(x.num_rows if hasattr(x, "num_rows") else len(x) for x in batches)
    received = 0
    started = time.thread_time()
    for batch in batches:
        out.send(batch)
        left.flush()
        for kind, _, _, payload in right.receive():
            inp.deliver(kind, payload)
        while (element := inp.poll()) is not None:
            received += element.num_rows if hasattr(element, "num_rows") else len(element)
    while received < rows:
        left.flush()
        for kind, _, _, payload in right.receive():
            inp.deliver(kind, payload)
        while (element := inp.poll()) is not None:
            received += element.num_rows if hasattr(element, "num_rows") else len(element)
    cpu = time.thread_time() - started
    sent = getattr(left, "sent_bytes", float("nan"))  # (links before issue 36 did not count)
    left.close()
    right.close()
    return {"rows": rows, "us_per_1k_rows": cpu / rows * 1e9, "bytes_per_row": sent / rows}


def crossing(corpus: str, job: str, local: bool) -> dict[str, float]:
    """Rows and bytes per word the word count's key exchange carries (in-process, parallelism 2)."""
    from epochal import StreamEnvironment
    from epochal.connectors import TextFileSource
    from epochal.runtime.task.output_gate import OutputGate
    from epochal.runtime.wire.network import encode_arrow

    from . import workloads as w

    seen = {"rows": 0, "bytes": 0}
    original = OutputGate.emit

    def emit(gate: OutputGate, batch: Any) -> None:
        for partitioner, _ in gate.edges:
            if partitioner.kind.value == "key_group":
                for _, piece in partitioner.split(batch):
                    seen["rows"] += piece.num_rows if hasattr(piece, "num_rows") else len(piece)
                    seen["bytes"] += len(encode_arrow(piece)) if hasattr(piece, "num_rows") else len(
                        pickle.dumps(piece, protocol=5))
        original(gate, batch)

    OutputGate.emit = emit  # type: ignore[method-assign]
    try:
        env = StreamEnvironment(parallelism=2, executor="inprocess")
        lines = env.from_source(TextFileSource(corpus))
        if job == "records":
            keyed = lines.flat_map(str.split).key_by(w.identity)
        else:
            keyed = lines.map_batches(w.split_on_spaces).key_by("word")
        keyed.count(emit="on_checkpoint", combine=local).sink_to(w.NullSink())
        result = env.execute(f"crossing-{job}")
    finally:
        OutputGate.emit = original  # type: ignore[method-assign]
    names = {op.name for op in result.operators}
    words = result.operator("count-local" if "count-local" in names else "count").records_in
    return {"words": words, "rows_per_word": seen["rows"] / words, "bytes_per_word": seen["bytes"] / words}


@benchmark("exchange", "The key exchange: CPU and bytes a row costs to cross, and how many rows cross (issue 36)")
def run(quick: bool) -> dict[str, Any]:
    import pyarrow.compute as pc

    from . import wordcount

    corpus = tempfile.mkdtemp(prefix="epochal-exchange-corpus-")
    lines = 20_000 if quick else 250_000
    try:
        wordcount.write_corpus(corpus, lines=lines, files=4, vocabulary=10_000 if quick else 100_000)
        import pyarrow as pa

        text = pa.concat_arrays([pa.array(open(f).read().split("\n")[:-1])
                                 for f in wordcount.corpus_files(corpus)])
        words = pc.list_flatten(pc.split_pattern(text, " "))
        shapes = _shapes(words.slice(0, HOP_ROWS))
        hops = {name: hop(batches) for name, batches in shapes.items()}
        crossings = {f"{job}, local phase {'on' if local else 'off'}": crossing(corpus, job, local)
                     for job in ("records", "columnar") for local in (False, True)}
    finally:
        import shutil

        shutil.rmtree(corpus, ignore_errors=True)
    result: dict[str, Any] = {"hops": hops, "crossings": crossings, "copies": COPIES, "cores": os.cpu_count()}
    result["summary"] = _summary(result)
    return result


def _summary(result: dict[str, Any]) -> str:
    lines = [
        "One hop between two workers (a remote channel pair over loopback TCP, both ends on one thread, "
        "CPU time):", "",
        "| batches | µs per 1,000 rows | bytes per row |", "|---|---:|---:|",
    ]
    for name, h in result["hops"].items():
        lines.append(f"| {name} | {h['us_per_1k_rows']:,.0f} | {h['bytes_per_row']:.1f} |")
    lines += [
        "", f"An Arrow batch is copied {result['copies']['now']} time(s) on its way (the IPC write; the socket "
        f"reads and writes views), {result['copies']['before']} before issue 36.", "",
        "What the word count's key exchange carries (parallelism 2, in-process, each crossing batch encoded as "
        "for the wire):", "",
        "| job | rows per word | bytes per word |", "|---|---:|---:|",
    ]
    for name, c in result["crossings"].items():
        lines.append(f"| {name} | {c['rows_per_word']:.4f} | {c['bytes_per_word']:.3f} |")
    return "\n".join(lines) + "\n"
