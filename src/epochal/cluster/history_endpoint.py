"""The dashboard of a job that ended, served from its history (`runtime.master.history`).

`epochal history DIR --web-port N` serves one recorded run the way the job's own control
endpoint served it while it ran (as Flink's history server serves archived jobs): the same
dashboard files, `GET /status` (the recorded status, marked `"archived": true` with the run's id
and summary line) and `GET /metrics.json` (the recorded snapshot). Nothing acts: every `POST`
answers 409, and the page disables its actions.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import SplitResult

from ..runtime.master.history import RunRecord
from .http_handler import HttpEndpoint, JsonHandler


class HistoryEndpoint(HttpEndpoint):
    """Serves one recorded run over HTTP until `close()`."""

    def __init__(self, record: RunRecord, host: str = "127.0.0.1", port: int = 0) -> None:
        self.record = record
        status = {**record.status, "archived": True, "run": record.run, "summary": record.summary}
        self._status = json.dumps(status).encode()
        self._metrics = json.dumps(record.metrics or {}).encode()
        super().__init__(type("Handler", (_Handler,), {"endpoint": self}), host, port, "epochal-history")


class _Handler(JsonHandler):
    """The recorded `/status` and `/metrics.json`; no actions."""

    server_version = "epochal-history"
    endpoint: ClassVar[HistoryEndpoint]
    missing = "no such page in a job's history"

    def _status(self, url: SplitResult) -> None:
        self.send(HTTPStatus.OK, "application/json", self.endpoint._status)

    def _metrics(self, url: SplitResult) -> None:
        self.send(HTTPStatus.OK, "application/json", self.endpoint._metrics)

    pages = {"/status": _status, "/metrics.json": _metrics}

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        self.reply(HTTPStatus.CONFLICT, {"error": "the job has ended: this is its history, nothing acts on it"})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
        pass
