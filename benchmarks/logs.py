"""Message logs: each log source against its own client reading the same data, each log sink
against its client writing the same rows, and the sinks in a job beside a discarding sink.

Real servers, started here on 127.0.0.1: `nats-server -js` and `redis-server` (no persistence,
so the disk is not what is measured). The data: `RECORDS` JSON clicks (`{"user", "n", "page",
"ts"}`, about 70 bytes), over 4 partitions (JetStream subjects `b.0`…`b.3` of one stream; Redis
streams `bench:0`…`bench:3`).

1. Sources, one process (records/s, and records per CPU-second of the process: the framework
   fetches on a thread of its own): `JetStreamSource` / `RedisStreamSource` reading every
   partition to its end (bounded) into Arrow batches of 1,024, against the server's own client
   reading the same messages and decoding each with `json.loads`: nats-py's pull consumer
   (`fetch(1000)`), redis-py's `XRANGE ... COUNT 1000` (with hiredis). Also the clients without
   decoding, the floor of what any reader of that client pays.
2. Sinks, one process: the same rows (one Arrow batch) through a sink writer and one commit,
   against the client publishing them (`json.dumps` per row): nats-py's `publish_async` with
   message ids, redis-py's pipelined `XADD`.
3. A job on local Spark (2 workers, 1 s checkpoints): `JetStreamSource → key_by("user")
   .count(emit=...) → sink` with a discarding sink, `JetStreamSink` and `RedisStreamSink`,
   each with `emit="on_checkpoint"`, and the log sinks with `emit="per_record"` too.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .logs_job import INTERVAL, JOB_SINKS
from .runner import benchmark, pyplot, save_figure
from .spark_subprocess import run_on_spark

PARTITIONS = 4
USERS = 2_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(command: list[str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            time.sleep(0.5)  # JetStream starts after the port opens
            return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{command[0]} did not start") from None
            time.sleep(0.05)  # the poll interval of a server starting


def _payloads(count: int) -> list[bytes]:
    pages = ("home", "search", "item", "cart")
    return [json.dumps({"user": f"u{(i * 7919) % USERS}", "n": i, "page": pages[i % 4],
                        "ts": 1_764_000_000 + i / 1000}).encode() for i in range(count)]


def _schema() -> Any:
    from .logs_job import clicks_schema

    return clicks_schema()


def _timed(fn: Callable[[], int], reps: int) -> dict[str, Any]:
    """The best of `reps` runs of `fn` (it returns the records it handled): wall and CPU time."""
    best: dict[str, Any] = {}
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        records = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if not best or wall < best["seconds"]:
            best = {"records": records, "seconds": wall, "cpu_seconds": cpu, "records_per_s": records / wall,
                    "records_per_cpu_s": records / max(cpu, 1e-9)}
    return best


# -- setup -----------------------------------------------------------------------------------------
async def _nats_setup(url: str, payloads: list[bytes]) -> None:
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="BENCH", subjects=["b.*"], storage=StorageType.MEMORY))
    await js.add_stream(StreamConfig(name="OUT", subjects=["out.>"], storage=StorageType.MEMORY))
    for i, payload in enumerate(payloads):
        await js.publish_async(f"b.{i % PARTITIONS}", payload)
    await js.publish_async_completed()
    await nc.close()


def _redis_setup(url: str, payloads: list[bytes]) -> None:
    import redis

    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for i, payload in enumerate(payloads):
        pipe.xadd(f"bench:{i % PARTITIONS}", {"data": payload})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


# -- 1. sources ------------------------------------------------------------------------------------
def _read_source(source: Any) -> int:
    source.check()
    rows = 0
    for split in source.splits():
        reader = source.open_split(split, None)
        while (batch := reader.read(1024)) is not None:
            rows += len(batch)
            if not len(batch):
                time.sleep(0.0005)  # the fetcher is fetching
        reader.close()
    return rows


def _nats_client_read(url: str, count: int, decode: bool) -> int:
    async def go() -> int:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc = await nats.connect(url)
        js = nc.jetstream()
        sub = await js.pull_subscribe("b.*", stream="BENCH", config=ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, inactive_threshold=30))
        rows = 0
        while rows < count:
            for msg in await sub.fetch(1000, timeout=5):
                if decode:
                    json.loads(msg.data)
                rows += 1
        await sub.unsubscribe()
        await nc.close()
        return rows

    return asyncio.run(go())


def _redis_client_read(url: str, decode: bool) -> int:
    import redis

    client = redis.Redis.from_url(url)
    rows = 0
    for p in range(PARTITIONS):
        cursor = "-"
        while True:
            entries = client.xrange(f"bench:{p}", cursor, "+", count=1000)
            if not entries:
                break
            for _, fields in entries:
                if decode:
                    json.loads(fields[b"data"])
            rows += len(entries)
            cursor = "(" + entries[-1][0].decode()
    return rows


def sources(nats_url: str, redis_url: str, count: int, reps: int) -> dict[str, Any]:
    from epochal.connectors.jetstream import JetStreamSource
    from epochal.connectors.log import JsonFormat
    from epochal.connectors.redis_streams import RedisStreamSource

    schema = _schema()
    out = {
        "jetstream_source": _timed(lambda: _read_source(
            JetStreamSource(nats_url, "BENCH", JsonFormat(schema), bounded=True)), reps),
        "nats_py_json": _timed(lambda: _nats_client_read(nats_url, count, True), reps),
        "nats_py_raw": _timed(lambda: _nats_client_read(nats_url, count, False), reps),
        "redis_source": _timed(lambda: _read_source(
            RedisStreamSource(redis_url, "bench:*", JsonFormat(schema), bounded=True)), reps),
        "redis_py_json": _timed(lambda: _redis_client_read(redis_url, True), reps),
        "redis_py_raw": _timed(lambda: _redis_client_read(redis_url, False), reps),
    }
    for name, r in out.items():
        if r["records"] != count:
            raise RuntimeError(f"{name}: read {r['records']} records of {count}")
    return out


# -- 2. sinks --------------------------------------------------------------------------------------
def _write_sink(sink: Any, batch: Any) -> int:
    writer = sink.create_writer(0, 1)
    for start in range(0, batch.num_rows, 1024):
        writer.write(batch.slice(start, 1024))
    epoch = writer.prepare_commit(1)
    sink.commit([epoch])
    return batch.num_rows


def _nats_client_write(url: str, rows: list[dict[str, Any]]) -> int:
    async def go() -> int:
        import nats

        nc = await nats.connect(url)
        js = nc.jetstream()
        for i, row in enumerate(rows):
            await js.publish_async("out.client", json.dumps(row).encode(), headers={"Nats-Msg-Id": f"c-{i}"})
        await js.publish_async_completed()
        await js.purge_stream("OUT")
        await nc.close()
        return len(rows)

    return asyncio.run(go())


def _redis_client_write(url: str, rows: list[dict[str, Any]]) -> int:
    import redis

    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for i, row in enumerate(rows):
        pipe.xadd("out:client", {"data": json.dumps(row).encode()})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    client.delete("out:client")
    return len(rows)


def sinks(nats_url: str, redis_url: str, count: int, reps: int) -> dict[str, Any]:
    import pyarrow as pa

    from epochal.connectors.jetstream import JetStreamSink
    from epochal.connectors.log import JsonFormat
    from epochal.connectors.redis_streams import RedisStreamSink

    rows = [json.loads(p) for p in _payloads(count)]
    batch = pa.RecordBatch.from_pylist(rows, schema=_schema())
    fmt = JsonFormat(_schema())
    return {
        "jetstream_sink": _timed(lambda: _write_sink(JetStreamSink(nats_url, "out.sink", fmt), batch), reps),
        "nats_py": _timed(lambda: _nats_client_write(nats_url, rows), reps),
        "redis_sink": _timed(lambda: _write_sink(RedisStreamSink(redis_url, "out:sink", fmt), batch), reps),
        "redis_py": _timed(lambda: _redis_client_write(redis_url, rows), reps),
    }


# -- the benchmark ---------------------------------------------------------------------------------
@benchmark("logs", "Message logs: JetStream and Redis Streams sources and sinks against their own clients")
def run(quick: bool) -> dict[str, Any]:
    count = 20_000 if quick else int(os.environ.get("EPOCHAL_LOGS_RECORDS", 300_000))
    reps = 1 if quick else int(os.environ.get("EPOCHAL_LOGS_REPS", 3))
    work = tempfile.mkdtemp(prefix="epochal-logs-")
    nats_port, redis_port = _free_port(), _free_port()
    nats_bin = shutil.which("nats-server") or "/usr/sbin/nats-server"
    redis_bin = shutil.which("redis-server") or "/usr/bin/redis-server"
    servers = [
        _start([nats_bin, "-js", "-a", "127.0.0.1", "-p", str(nats_port), "-sd", work], nats_port),
        _start([redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
               redis_port),
    ]
    nats_url, redis_url = f"nats://127.0.0.1:{nats_port}", f"redis://127.0.0.1:{redis_port}/0"
    try:
        payloads = _payloads(count)
        asyncio.run(_nats_setup(nats_url, payloads))
        _redis_setup(redis_url, payloads)
        read = sources(nats_url, redis_url, count, reps)
        write = sinks(nats_url, redis_url, count, reps)
        job = run_on_spark("local[2]", "benchmarks.logs_job", "spark_job", nats_url=nats_url, redis_url=redis_url,
                           reps=max(1, reps - 1))
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    for sink, sink_runs in job.items():
        for r in sink_runs:
            if r["records"] != count:
                raise RuntimeError(f"{sink}: counted {r['records']} records of {count}")
    result: dict[str, Any] = {"records": count, "reps": reps, "sources": read, "sinks": write, "job": job,
                              "interval": INTERVAL}
    _plot(result)
    result["summary"] = _summary(result)
    return result


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda r: r["records_per_s"])


def _summary(result: dict[str, Any]) -> str:
    src, snk, job = result["sources"], result["sinks"], result["job"]

    def row(label: str, r: dict[str, Any], base: dict[str, Any] | None) -> str:
        ratio = f"{r['records_per_s'] / base['records_per_s']:.2f}×" if base else "1.00×"
        return f"| {label} | {r['records_per_s']:,.0f} | {r['records_per_cpu_s']:,.0f} | {ratio} |"

    lines = [
        f"{result['records']:,} JSON clicks (about 70 bytes) over 4 partitions, servers on 127.0.0.1 without "
        f"persistence; best of {result['reps']}, one process (records per CPU-second counts every thread of it).",
        "",
        "**Sources**: reading every partition to its end into Arrow batches of 1,024, against the server's own "
        "client reading the same messages and decoding each with `json.loads` (and not decoding, the client's "
        "floor).",
        "",
        "| Reader | Records/s | Records per CPU-s | vs client + json.loads |",
        "|---|---:|---:|---:|",
        row("`JetStreamSource` (JsonFormat)", src["jetstream_source"], src["nats_py_json"]),
        row("nats-py pull consumer, `fetch(1000)` + `json.loads`", src["nats_py_json"], None),
        row("nats-py pull consumer, no decoding", src["nats_py_raw"], src["nats_py_json"]),
        row("`RedisStreamSource` (JsonFormat)", src["redis_source"], src["redis_py_json"]),
        row("redis-py `XRANGE COUNT 1000` (hiredis) + `json.loads`", src["redis_py_json"], None),
        row("redis-py `XRANGE`, no decoding", src["redis_py_raw"], src["redis_py_json"]),
        "",
        "**Sinks**: the same rows (one Arrow batch) through a sink writer and one commit (exactly once: message "
        "ids and a commit marker; MULTI/EXEC with the writer's marker), against the client writing them with "
        "`json.dumps` per row.",
        "",
        "| Writer | Records/s | Records per CPU-s | vs client |",
        "|---|---:|---:|---:|",
        row("`JetStreamSink` (one epoch)", snk["jetstream_sink"], snk["nats_py"]),
        row("nats-py `publish_async` with `Nats-Msg-Id`", snk["nats_py"], None),
        row("`RedisStreamSink` (one epoch, MULTI/EXEC)", snk["redis_sink"], snk["redis_py"]),
        row("redis-py pipelined `XADD`", snk["redis_py"], None),
        "",
        f"**In a job**: `JetStreamSource → key_by(\"user\").count(emit=…) → sink`, 2 workers on local Spark, "
        f"checkpoints every {result['interval']:g} s, timed from every worker running to the job finished "
        f"(best of {len(job['discard'])}).",
        "",
        "| Sink | emit | Records/s | vs discard | Rows out |",
        "|---|---|---:|---:|---:|",
    ]
    discard = _best(job["discard"])["records_per_s"]
    names = {"discard": "discarding", "jetstream": "`JetStreamSink`", "redis": "`RedisStreamSink`"}
    for sink in JOB_SINKS:
        best = _best(job[sink])
        lines.append(f"| {names[sink.split('-')[0]]} | {best['emit']} | {best['records_per_s']:,.0f} | "
                     f"{best['records_per_s'] / discard - 1:+.1%} | {best['rows_out']:,} |")
    lines += ["", "![Records per second, sources and sinks against their clients](img/logs.png)"]
    return "\n".join(lines)


def _plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    src, snk = result["sources"], result["sinks"]
    labels = ["JetStream\nsource", "nats-py\n+json", "Redis\nsource", "redis-py\n+json",
              "JetStream\nsink", "nats-py\npublish", "Redis\nsink", "redis-py\nXADD"]
    values = [src["jetstream_source"], src["nats_py_json"], src["redis_source"], src["redis_py_json"],
              snk["jetstream_sink"], snk["nats_py"], snk["redis_sink"], snk["redis_py"]]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.bar(labels, [v["records_per_s"] / 1e3 for v in values], color=["C0", "C1"] * 4)
    ax.set_ylabel("thousand records/s")
    ax.set_title("Message logs: Epochal's connectors (blue) against each server's own client (orange), one process")
    fig.tight_layout()
    save_figure(fig, "logs")
