"""map_async: requests in flight on the worker's event loop, in order or not, bounded by the
capacity, failing by `on_error`, and exactly once across a crash and a rescale with requests in
flight (every result committed once, every request made at least once)."""

from __future__ import annotations

import asyncio
import http.server
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from epochal import (
    AsyncFunction,
    CheckpointConfig,
    JobFailedError,
    RestartStrategy,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.testing import CollectSink, Crash, ListSource
from epochal.windows import Tumbling


async def doubled(x: int) -> int:
    await asyncio.sleep(random.random() * 0.004)
    return x * 2


@pytest.mark.parametrize("ordered", [True, False])
def test_results_in_order_or_as_they_come(ordered: bool) -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(list(range(500)), batch_size=40)).map_async(
        doubled, capacity=20, ordered=ordered).sink_to(sink)
    env.execute("ordered" if ordered else "unordered")
    out = sink.committed()
    assert sorted(out) == [2 * i for i in range(500)]
    if ordered:
        assert out == [2 * i for i in range(500)]
    else:
        assert out != [2 * i for i in range(500)], "random delays reorder results"


class Concurrency(AsyncFunction[int, int]):
    """Counts the requests in flight at once; `open` is a coroutine (it runs on the loop)."""

    most: ClassVar[int] = 0
    now: ClassVar[int] = 0
    events: ClassVar[list[str]] = []

    async def open(self, ctx: Any) -> None:
        asyncio.get_running_loop()  # it runs on the worker's loop
        Concurrency.events.append(f"open {ctx.subtask}/{ctx.parallelism}")

    async def invoke(self, value: int) -> int:
        Concurrency.now += 1
        Concurrency.most = max(Concurrency.most, Concurrency.now)
        await asyncio.sleep(0.002)
        Concurrency.now -= 1
        return value

    async def close(self) -> None:
        Concurrency.events.append("close")


def test_the_capacity_bounds_the_requests_in_flight_and_open_and_close_run_on_the_loop() -> None:
    Concurrency.most, Concurrency.events = 0, []
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(list(range(300)))).map_async(Concurrency(), capacity=7).sink_to(sink)
    env.execute("capacity")
    assert sorted(sink.committed()) == list(range(300))
    assert Concurrency.most == 7
    assert Concurrency.events == ["open 0/1", "close"]


async def flaky(x: int) -> int:
    if x % 10 == 3:
        raise ValueError(f"no answer for {x}")
    if x % 10 == 7:
        await asyncio.sleep(10)  # times out
    return x


def test_timeouts_and_errors_follow_on_error() -> None:
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(list(range(40)))).map_async(
        flaky, timeout=0.05, on_error="skip").sink_to(sink)
    result = env.execute("skip")
    assert sink.committed() == [x for x in range(40) if x % 10 not in (3, 7)]
    assert result.operator("map_async").skipped_records == 8

    letters = CollectSink()
    env = StreamEnvironment(parallelism=1, executor="inprocess", dead_letter=letters)
    sink = CollectSink()
    env.from_source(ListSource(list(range(20)))).map_async(
        flaky, timeout=0.05, on_error="dead_letter").sink_to(sink)
    env.execute("dead letters")
    assert sink.committed() == [x for x in range(20) if x % 10 not in (3, 7)]
    errors = {d["record"]: d["error"] for d in letters.committed()}
    assert set(errors) == {3, 7, 13, 17}
    assert "no answer for 3" in errors[3] and "no result within 0.05 s" in errors[7]

    env = StreamEnvironment(parallelism=1, executor="inprocess", restart=RestartStrategy.none())
    env.from_source(ListSource(list(range(20)))).map_async(flaky, timeout=0.05, name="lookup").sink_to(CollectSink())
    with pytest.raises(JobFailedError, match="lookup") as info:
        env.execute("fail")
    assert "no answer for 3" in str(info.value)


def test_a_watermark_never_overtakes_the_records_before_it() -> None:
    """Unordered results may pass each other, never a watermark: the windows after it see no
    late record, and count every record."""
    records = [{"t": i * 0.01, "k": i % 3} for i in range(600)]
    env = StreamEnvironment(parallelism=1, executor="inprocess")
    sink = CollectSink()

    async def later(r: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(random.random() * 0.01 if r["t"] % 1 < 0.5 else 0.0)
        return r

    results = (env.from_source(ListSource(records, batch_size=25),
                               watermarks=WatermarkStrategy.for_monotonous_timestamps(timestamp="t"))
               .map_async(later, capacity=50, ordered=False)
               .key_by("k").window(Tumbling(1.0)).count())
    results.sink_to(sink)
    late = CollectSink()
    results.late_records().sink_to(late)
    result = env.execute("watermarks")
    assert late.committed() == []
    assert sum(n for *_, n in sink.committed()) == 600
    assert result.operator("count").late_records == 0


class Counted(AsyncFunction[int, int]):
    calls: ClassVar[dict[int, int]] = {}

    async def invoke(self, value: int) -> int:
        Counted.calls[value] = Counted.calls.get(value, 0) + 1
        await asyncio.sleep(random.random() * 0.003)
        return value


def test_a_crash_with_requests_in_flight_commits_every_result_once(tmp_path: Path) -> None:
    Counted.calls = {}
    items: list[Any] = list(range(2000))
    items.insert(1200, Crash())
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "c")))
    sink = CollectSink()
    env.from_source(ListSource(items, splits=2, batch_size=30)).map_async(
        Counted(), capacity=40, ordered=False).uid("lookup").sink_to(sink)
    result = env.execute("crash")
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert sorted(sink.committed()) == list(range(2000))
    assert set(Counted.calls) == set(range(2000))  # each request at least once
    assert sum(Counted.calls.values()) > 2000  # some were made again after the restore


class Gate(AsyncFunction[int, int]):
    """Holds every request until `released`: the checkpoint a rescale takes has them in flight."""

    released: ClassVar[bool] = False
    in_flight: ClassVar[int] = 0
    calls: ClassVar[dict[int, int]] = {}

    async def invoke(self, value: int) -> int:
        Gate.calls[value] = Gate.calls.get(value, 0) + 1
        Gate.in_flight += 1
        try:
            while not Gate.released:
                await asyncio.sleep(0.002)
            return value
        finally:
            Gate.in_flight -= 1


def test_requests_in_flight_move_with_a_rescale_and_commit_once(tmp_path: Path) -> None:
    Gate.released, Gate.in_flight, Gate.calls = False, 0, {}
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    sink = CollectSink()
    # not full (a full operator reads no input, barriers included, until a request leaves)
    env.from_source(ListSource(list(range(400)), splits=4, batch_size=10)).rebalance().map_async(
        Gate(), capacity=1000, timeout=None).uid("gate").sink_to(sink)
    handle = env.execute_async("rescaled")
    deadline = time.monotonic() + 30
    while Gate.in_flight < 400:  # every request in flight
        assert time.monotonic() < deadline, Gate.in_flight
        time.sleep(0.01)
    assert handle.rescale(3, timeout=60) is not None  # the checkpoint it rescaled at
    Gate.released = True
    handle.result(timeout=60)
    assert handle.status().parallelism == 3
    assert sorted(sink.committed()) == list(range(400))
    # in flight at the rescale's checkpoint: every request was made again by the new subtasks
    assert all(Gate.calls[v] >= 2 for v in range(400))


SERVED = {"now": 0, "most": 0}


@pytest.fixture
def slow_server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 answering `GET /n` with `n * 3` after 10 ms; `SERVED`
    counts the requests it serves at once."""
    lock = threading.Lock()
    SERVED.update(now=0, most=0)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            with lock:
                SERVED["now"] += 1
                SERVED["most"] = max(SERVED["most"], SERVED["now"])
            time.sleep(0.01)
            with lock:
                SERVED["now"] -= 1
            body = str(int(self.path.strip("/")) * 3).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 256  # the default backlog (5) drops connections made at once
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class HttpLookup(AsyncFunction[int, tuple[int, int]]):
    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self, ctx: Any) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()

    async def invoke(self, value: int) -> tuple[int, int]:
        async with self.session.get(f"{self.url}/{value}") as response:
            return value, int(await response.text())

    async def close(self) -> None:
        await self.session.close()


def test_an_aiohttp_client_works_inside(slow_server: str) -> None:
    pytest.importorskip("aiohttp")
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    sink = CollectSink()
    env.from_source(ListSource(list(range(200)), splits=2)).map_async(
        HttpLookup(slow_server), capacity=20).sink_to(sink)
    env.execute("http")
    assert sorted(sink.committed()) == [(i, 3 * i) for i in range(200)]
    assert SERVED["most"] > 2, "requests overlap: more in flight than subtasks"
