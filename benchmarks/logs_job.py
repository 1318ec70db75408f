"""The `logs` benchmark's job on local Spark (run in a process of its own by `benchmarks.logs`):
`JetStreamSource → key_by("user").count(emit=...) → sink`, with a discarding sink, `JetStreamSink`
and `RedisStreamSink`, each with `emit="on_checkpoint"`, and the log sinks with `emit="per_record"`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from typing import Any

INTERVAL = 1.0
JOB_SINKS = ("discard", "jetstream", "redis", "jetstream-per-record", "redis-per-record")


def clicks_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("user", pa.string()), ("n", pa.int64()), ("page", pa.string()), ("ts", pa.float64())])


def spark_job(session: Any, nats_url: str, redis_url: str, reps: int) -> dict[str, Any]:
    """`JetStreamSource → key_by("user").count(emit) → sink`, every sink `reps` times in rounds."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in JOB_SINKS}
    _job(session, nats_url, redis_url, "discard")  # the workers' first job pays the imports
    for r in range(reps):
        for sink in JOB_SINKS[r % len(JOB_SINKS):] + JOB_SINKS[: r % len(JOB_SINKS)]:
            runs[sink].append(_job(session, nats_url, redis_url, sink))
    return runs


def _job(session: Any, nats_url: str, redis_url: str, sink: str) -> dict[str, Any]:
    from epochal import CheckpointConfig, StreamEnvironment
    from epochal.cluster.spark import SparkExecutor
    from epochal.connectors.jetstream import JetStreamSink, JetStreamSource
    from epochal.connectors.log import JsonFormat
    from epochal.connectors.redis_streams import RedisStreamSink

    from . import workloads as w

    work = tempfile.mkdtemp(prefix=f"epochal-logs-{sink}-")
    try:
        env = StreamEnvironment(parallelism=2, spark=session,
                                checkpoint=CheckpointConfig(interval=INTERVAL, directory=os.path.join(work, "ckpt")))
        emit = "per_record" if sink.endswith("per-record") else "on_checkpoint"
        import pyarrow as pa

        counts = JsonFormat(pa.schema([("user", pa.string()), ("count", pa.int64())]))
        source = JetStreamSource(nats_url, "BENCH", JsonFormat(clicks_schema()), bounded=True)
        target: Any = {"discard": w.NullSink, "jetstream": lambda: JetStreamSink(nats_url, "out.job", counts),
                       "redis": lambda: RedisStreamSink(redis_url, "out:job", counts)}[sink.split("-")[0]]()
        (env.from_source(source).key_by("user").count(emit=emit)  # type: ignore[arg-type]
            .map(lambda kv: {"user": kv[0], "count": kv[1]}).sink_to(target))
        executor = SparkExecutor(session)
        result = executor.execute(env.job_graph(f"logs-{sink}"))
        events = dict(executor.timeline)
        seconds = events["finished"] - events["running"]
        records = result.operator("count").records_in
        return {"sink": sink, "emit": emit, "seconds": seconds, "records": records,
                "records_per_s": records / seconds, "rows_out": result.operator("count").records_out,
                "checkpoints": len(result.checkpoints)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _clear_outputs(nats_url, redis_url)


def _clear_outputs(nats_url: str, redis_url: str) -> None:
    import redis

    async def purge() -> None:
        import nats

        nc = await nats.connect(nats_url)
        await nc.jetstream().purge_stream("OUT")
        await nc.close()

    asyncio.run(purge())
    redis.Redis.from_url(redis_url).delete("out:job")
