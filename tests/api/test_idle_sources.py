"""An idle source costs no CPU: a reader that found nothing is asked again only after its
`retry_after()`, and a task whose splits all wait is not stepped until the first is due."""

from __future__ import annotations

import time

from epochal import StreamEnvironment
from epochal.testing import CollectSink
from spark_jobs import QuietSource, wait_until


def test_a_quiet_source_is_polled_at_its_readers_pace_not_in_a_loop() -> None:
    source = QuietSource(records=100, wait=0.2)
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(source).map(lambda x: x).sink_to(sink)
    handle = env.execute_async("quiet")
    try:
        wait_until(lambda: len(source.reads) >= 2 and source.reads[-1] == 100, "the source to go quiet", 30)
        quiet_since = len(source.reads)
        time.sleep(1.0)
        idle_reads = len(source.reads) - quiet_since
        assert 3 <= idle_reads <= 7  # about one read per 0.2 s, not thousands
    finally:
        handle.cancel()


def test_a_quiet_split_does_not_hold_back_the_others() -> None:
    """Two sources in one job: one quiet early, one with data; the busy one is read at full pace."""
    quiet, busy = QuietSource(records=10, wait=5.0), QuietSource(records=20_000, wait=5.0)
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(quiet).union(env.from_source(busy)).sink_to(sink)
    handle = env.execute_async("one-quiet")
    try:
        started = time.monotonic()
        wait_until(lambda: bool(busy.reads) and busy.reads[-1] == 20_000, "the busy source read", 30)
        assert time.monotonic() - started < 5.0  # never waited out the quiet source's 5 s
        assert len(quiet.reads) <= 3
    finally:
        handle.cancel()
