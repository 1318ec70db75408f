"""Async I/O: each order priced by a slow HTTP service, fifty lookups in flight at a time.

A price service is started on 127.0.0.1 (a process of its own, answering each `GET /price/ITEM`
after 20 ms). The job reads 400 orders and prices each with `map_async`: `PriceLookup` is an
`AsyncFunction` whose `open` makes one `aiohttp.ClientSession` per subtask on the worker's event
loop and whose `invoke` awaits one request per order. Up to `capacity=50` requests per subtask
are in flight, so the job takes about 400 × 20 ms / (2 × 50) instead of 400 × 20 ms / 2; the
results keep the input order (`ordered=True`). A lookup that fails or takes longer than
`timeout` would follow `on_error` (here the default: the job fails, naming the order).

Exactly once: the lookups in flight at a checkpoint are part of it and are made again after a
restore, so every priced order is committed once (each lookup is made at least once).

Writes `(order, item, quantity, unit price, total)` to `out-priced/`; needs `aiohttp`
(`pip install aiohttp`).

    python examples/async_lookup.py                           # from the repository root
    epochal run --executor inprocess examples/async_lookup.py
"""

import subprocess
import sys
import time

from epochal import AsyncFunction, CheckpointConfig, StreamEnvironment
from epochal.connectors import FileSink
from epochal.testing import ListSource

PRICES = {"apple": 30, "pear": 45, "plum": 12, "fig": 80}
ORDERS = [(i, list(PRICES)[i % 4], 1 + i % 5) for i in range(400)]


SERVICE = r"""
import http.server, sys, time
PRICES = PRICES_HERE

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a connection serves many lookups

    def do_GET(self):
        time.sleep(float(sys.argv[1]))
        body = str(PRICES[self.path.rsplit("/", 1)[-1]]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 256  # the default listen backlog (5) drops connections made at once
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
""".replace("PRICES_HERE", repr(PRICES))


def start_price_service(latency=0.02):
    """A local HTTP service in a process of its own: `GET /price/ITEM` answers the item's price
    in cents after `latency` seconds. Returns the process and its URL."""
    process = subprocess.Popen([sys.executable, "-c", SERVICE, str(latency)], stdout=subprocess.PIPE, text=True)
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}"


class PriceLookup(AsyncFunction):
    """One HTTP session per subtask, on the worker's event loop; one request per order."""

    def __init__(self, url):
        self.url = url

    async def open(self, ctx):
        import aiohttp

        self.session = aiohttp.ClientSession()

    async def invoke(self, order):
        number, item, quantity = order
        async with self.session.get(f"{self.url}/price/{item}") as response:
            price = int(await response.text())
        return (number, item, quantity, price, quantity * price)

    async def close(self):
        await self.session.close()


if __name__ == "__main__":
    service, url = start_price_service()
    env = StreamEnvironment(parallelism=2,
                            checkpoint=CheckpointConfig(interval=0.5, directory="ckpt-priced", existing="overwrite"))
    (env.from_source(ListSource(ORDERS, splits=2))
        .map_async(PriceLookup(url), capacity=50, timeout=5.0, ordered=True)
        .sink_to(FileSink("out-priced/", mode="overwrite")))
    started = time.perf_counter()
    try:
        result = env.execute("async-lookup")
    finally:
        service.kill()
        service.wait()
    seconds = time.perf_counter() - started
    print(f"async_lookup: {result.operator('sink').records_in} orders priced into out-priced/ "
          f"({len(ORDERS) * 0.02 / 2:.0f} s of lookups one at a time; took {seconds:.1f} s), "
          f"{result.restarts} restart(s)")
