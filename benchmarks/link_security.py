"""What authenticated links and TLS cost (issue 38): the handshake at start-up, TLS on throughput.

- per link: a loopback connection made and proven, against a bare TCP connect, in the same run:
  the HMAC challenge-response alone, and inside TLS (the TLS handshake and the HMAC one);
- a link's own throughput: 256 KiB frames pushed through one loopback link as fast as it takes
  them, plain against TLS (the upper bound of what TLS can cost a job: nothing else runs);
- start-up on Spark `local[2]`: a small job's submit → every worker running (timeline events),
  plain and with TLS, interleaved; a job of N workers makes N(N-1)/2 data links and N control
  links at start, so the handshake's share of start-up is that many links' cost;
- throughput on Spark `local[2]`, parallelism 2: the word count as a user runs it, text files in
  (`TextFileSource`), a running count by word, `FileSink` out: half of the words cross the link
  between the two workers. Plain links (authenticated) against TLS, interleaved runs, from every
  worker running to the job finished.
"""

from __future__ import annotations

import os
import random
import socket
import statistics
import tempfile
import threading
import time
from typing import Any

from .runner import benchmark, pyplot, save_figure
from .spark_subprocess import run_on_spark


# -- per link, on loopback ---------------------------------------------------------------------------
def _links(count: int, tls: Any, handshake: bool) -> list[float]:
    """Seconds per link: connect (and prove, if `handshake`) `count` times."""
    from epochal.runtime.wire import tls as wire_tls
    from epochal.runtime.wire.handshake import HELLO_BYTES, Role, new_secret, secure_client
    from epochal.runtime.wire.incoming import Acceptor
    from epochal.runtime.wire.network import HELLO, write_object_blocking

    secret = new_secret()
    server = socket.create_server(("127.0.0.1", 0))
    address = server.getsockname()
    accepted: list[Any] = []
    stop = threading.Event()
    if handshake:
        acceptor = Acceptor(server, "bench", secret, Role.WORKER, Role.WORKER, lambda r: None,
                            wire_tls.server_context(tls) if tls else None)

        def serve() -> None:
            while not stop.is_set():
                accepted.extend(acceptor.poll(0.01))
    else:
        def serve() -> None:
            server.settimeout(0.01)
            while not stop.is_set():
                try:
                    sock, _ = server.accept()
                except TimeoutError:
                    continue
                sock.recv(HELLO_BYTES)
                accepted.append(sock)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_tls = wire_tls.client_context(tls) if tls else None
    times = []
    for _ in range(count):
        want = len(accepted) + 1
        started = time.perf_counter()
        sock = socket.create_connection(address)
        if handshake:
            sock = secure_client(sock, secret, Role.WORKER, Role.WORKER, 5.0, client_tls)
            write_object_blocking(sock, "hello", kind=HELLO)
        else:
            sock.sendall(b"x" * HELLO_BYTES)
        while len(accepted) < want:
            time.sleep(0.00005)  # not a spin: the accepting thread needs the GIL
        times.append(time.perf_counter() - started)
        sock.close()
    stop.set()
    thread.join()
    server.close()
    return times


def per_link(count: int, tls: Any) -> dict[str, Any]:
    out = {}
    for label, config, handshake in (("tcp connect", None, False), ("handshake", None, True),
                                      ("tls + handshake", tls, True)):
        times = _links(count, config, handshake)
        out[label] = {"median_ms": statistics.median(times) * 1e3, "p90_ms": sorted(times)[int(0.9 * count)] * 1e3}
    return out


def link_throughput(megabytes: int, tls: Any) -> float:
    """MB/s through one proven link on loopback (frames of 256 KiB), TLS if `tls`."""
    import selectors

    from epochal.runtime.wire import tls as wire_tls
    from epochal.runtime.wire.handshake import Role, new_secret, secure_client
    from epochal.runtime.wire.incoming import Acceptor
    from epochal.runtime.wire.network import CONTROL, HELLO, Link, write_object_blocking

    secret = new_secret()
    server = socket.create_server(("127.0.0.1", 0))
    acceptor = Acceptor(server, "bench", secret, Role.WORKER, Role.WORKER, lambda r: None,
                        wire_tls.server_context(tls) if tls else None)
    frame, total = b"x" * (256 << 10), megabytes << 20
    received = [0]

    def receive() -> None:
        accepted: list[Any] = []
        while not accepted:
            accepted = acceptor.poll(0.05)
        link = accepted[0].link
        with selectors.DefaultSelector() as sel:
            sel.register(link, selectors.EVENT_READ)
            while received[0] < total:
                sel.select(0.05)
                for _, _, _, payload in link.receive():
                    received[0] += len(payload)
        link.close()

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    sock = secure_client(socket.create_connection(server.getsockname()), secret, Role.WORKER, Role.WORKER, 5.0,
                         wire_tls.client_context(tls) if tls else None)
    write_object_blocking(sock, "hello", kind=HELLO)
    link = Link(sock, "bench")
    started = time.perf_counter()
    with selectors.DefaultSelector() as sel:
        sel.register(link, selectors.EVENT_WRITE)
        sent = 0
        while sent < total or link.wants_write:
            if sent < total and len(link._out) < (4 << 20):
                link.send_frame(CONTROL, 0, 0, frame)
                sent += len(frame)
            link.flush()
            if link.wants_write:
                sel.select(0.05)
    thread.join()
    seconds = time.perf_counter() - started
    link.close()
    acceptor.close()
    server.close()
    return megabytes / seconds


# -- on Spark ----------------------------------------------------------------------------------------
def _corpus(directory: str, words: int) -> str:
    path = os.path.join(directory, f"corpus{words}")
    if not os.path.exists(path):
        os.makedirs(path)
        rng = random.Random(5)
        vocabulary = [f"w{i}" for i in range(20_000)]
        per_file = words // 4
        for f in range(4):
            with open(os.path.join(path, f"f{f}.txt"), "w") as out:
                for _ in range(per_file // 8):
                    out.write(" ".join(rng.choice(vocabulary) for _ in range(8)) + "\n")
    return path


def _job(session: Any, corpus: str, out: str, tls: Any) -> Any:
    from epochal import StreamEnvironment
    from epochal.config import NetworkConfig
    from epochal.connectors import FileSink, TextFileSource

    env = StreamEnvironment(parallelism=2, spark=session, network=NetworkConfig(tls=tls))
    env.from_source(TextFileSource(corpus)).flat_map(str.split).key_by(_identity).count().sink_to(
        FileSink(out, mode="overwrite"))
    return env.job_graph("wordcount-" + ("tls" if tls else "plain"))


def _identity(word: str) -> str:
    return word


def spark_part(session: Any, words: int, reps: int, workdir: str, tls: dict[str, str]) -> dict[str, Any]:
    """Start-up and throughput, plain against TLS, interleaved (in a child process)."""
    from epochal.cluster.spark import SparkExecutor
    from epochal.config import TlsConfig

    config = TlsConfig(**tls)
    corpus = _corpus(workdir, words)
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(reps):
        for label, tls_config in (("plain", None), ("tls", config)):
            executor = SparkExecutor(session)
            result = executor.execute(_job(session, corpus, os.path.join(workdir, f"out-{rep}-{label}"), tls_config))
            events = dict(executor.timeline)
            counted = result.operator("count").records_in
            seconds = events["finished"] - events["running"]
            runs.setdefault(label, []).append({
                "words": counted, "seconds": seconds, "words_per_s": counted / seconds,
                "startup_s": events["running"] - events["submitted"],
            })
    return runs


@benchmark("link_security", "Authenticated links and TLS: the handshake at start-up, TLS on the word count")
def run(quick: bool) -> dict[str, Any]:
    from epochal.testing import make_test_certificates

    words = 400_000 if quick else 3_000_000
    reps = 1 if quick else 3
    workdir = tempfile.mkdtemp(prefix="epochal-bench-links-")
    tls = make_test_certificates(os.path.join(workdir, "tls"))
    links = per_link(50 if quick else 400, tls)
    size = 64 if quick else 512
    throughput = {label: [link_throughput(size, config) for _ in range(reps)]
                  for label, config in (("plain", None), ("tls", tls))}
    spark = run_on_spark("local[2]", "benchmarks.link_security", "spark_part", words=words, reps=reps,
                         workdir=workdir, tls={"certfile": tls.certfile, "keyfile": tls.keyfile or "",
                                               "cafile": tls.cafile or ""})
    result: dict[str, Any] = {"words": words, "reps": reps, "per_link": links, "link_mb_per_s": throughput,
                              "spark": spark}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _best(runs: list[dict[str, float]]) -> float:
    return max(r["words_per_s"] for r in runs)


def _summary(result: dict[str, Any]) -> str:
    links, spark = result["per_link"], result["spark"]
    mbs = result["link_mb_per_s"]
    lines = [
        "| A link (loopback) | median | p90 |", "|---|---:|---:|",
        *(f"| {label} | {v['median_ms']:.2f} ms | {v['p90_ms']:.2f} ms |" for label, v in links.items()),
        "",
        "| One link's throughput (loopback, 256 KiB frames) | MB/s (best) | runs |", "|---|---:|---|",
        *(f"| {label} | {max(v):.0f} | {', '.join(f'{x:.0f}' for x in v)} |" for label, v in mbs.items()),
        "",
        "| Word count on Spark local[2], p=2 (files in, FileSink out) | words/s (best) | runs | start-up (median) |",
        "|---|---:|---|---:|",
    ]
    for label, runs in spark.items():
        rates = ", ".join(f"{r['words_per_s'] / 1e3:.0f}k" for r in runs)
        startup = statistics.median(r["startup_s"] for r in runs)
        lines.append(f"| {label} | {_best(runs) / 1e3:.0f}k | {rates} | {startup:.2f} s |")
    extra = links["handshake"]["median_ms"] - links["tcp connect"]["median_ms"]
    extra_tls = links["tls + handshake"]["median_ms"] - links["tcp connect"]["median_ms"]
    startups = [r["startup_s"] for r in spark["plain"]]
    cost = 1 - _best(spark["tls"]) / _best(spark["plain"])
    lines += [
        "",
        f"The handshake adds {extra:.2f} ms to a link over a bare TCP connect ({extra_tls:.2f} ms with TLS); "
        f"a job of 2 workers makes 3 links at start (1 between the workers, 2 to the job master), so "
        f"{3 * extra:.1f} ms ({3 * extra_tls:.1f} ms with TLS) of a {statistics.median(startups):.2f} s start "
        f"(submit to every worker running). TLS costs the word count {cost * 100:.0f} % of its throughput, "
        "best run against best run (within this machine's noise when small: compare the runs), while a link "
        f"alone, with nothing else to do, moves {(1 - max(mbs['tls']) / max(mbs['plain'])) * 100:.0f} % fewer "
        "bytes over TLS: the word count spends its time in Python, not on the wire.",
    ]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3))
    labels = list(result["spark"])
    ax.barh(labels, [_best(result["spark"][label]) / 1e3 for label in labels], color="#4a7ab8")
    ax.set_xlabel("thousand words/s (best run)")
    ax.set_title("Word count on Spark local[2]: plain links vs TLS")
    fig.tight_layout()
    save_figure(fig, "link_security.png")
