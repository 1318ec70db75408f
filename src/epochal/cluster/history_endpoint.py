"""The dashboard of a job that ended, served from its history (`runtime.master.history`).

`epochal history DIR --web-port N` serves one recorded run the way the job's own control
endpoint served it while it ran (as Flink's history server serves archived jobs): the same
dashboard files, `GET /status` (the recorded status, marked `"archived": true` with the run's id
and summary line) and `GET /metrics.json` (the recorded snapshot). Nothing acts: every `POST`
answers 409, and the page disables its actions.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..runtime.master.history import RunRecord
from .endpoint import _static


class HistoryEndpoint:
    """Serves one recorded run over HTTP until `close()`."""

    def __init__(self, record: RunRecord, host: str = "127.0.0.1", port: int = 0) -> None:
        self.record = record
        status = {**record.status, "archived": True, "run": record.run, "summary": record.summary}
        self._status = json.dumps(status).encode()
        self._metrics = json.dumps(record.metrics or {}).encode()
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="epochal-history",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(endpoint: HistoryEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "epochal-history"

        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            path = urllib.parse.urlsplit(self.path).path
            if path.rstrip("/") == "/status":
                self._send(HTTPStatus.OK, "application/json", endpoint._status)
            elif path == "/metrics.json":
                self._send(HTTPStatus.OK, "application/json", endpoint._metrics)
            elif (page := _static(path)) is not None:
                self._send(HTTPStatus.OK, *page)
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such page in a job's history: {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            self._error(HTTPStatus.CONFLICT, "the job has ended: this is its history, nothing acts on it")

        def _error(self, status: HTTPStatus, message: str) -> None:
            self._send(status, "application/json", json.dumps({"error": message}).encode())

        def _send(self, status: HTTPStatus, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
            pass

    return Handler
