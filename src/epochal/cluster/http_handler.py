"""What a job's two HTTP endpoints share: the live job's (`cluster.endpoint`) and a recorded run's
(`cluster.history_endpoint`).

`HttpEndpoint` serves on a thread of its own until `close()`. `JsonHandler` routes a request: a
GET to the page its path names (`pages`; `/status` with or without a trailing slash), else to a
dashboard file (`cluster/dashboard/`, only its own files, by name), else a 404; a POST to the
action its path names (`actions`), which needs the endpoint's token, sent as `Authorization:
Bearer <token>` and compared in constant time: an action without it is refused (401), logged with
the caller's address and counted in the job's refusals. Replies are JSON (or the file, or the
Prometheus text), never cached.
"""

from __future__ import annotations

import hmac
import json
import threading
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from ..runtime.wire.handshake import Refusals, refusal

Route = Callable[[Any, urllib.parse.SplitResult], None]  # a handler's method, given the request's URL


class HttpEndpoint:
    """An HTTP server of one endpoint, on a thread of its own until `close()`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str, port: int, name: str) -> None:
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        # a short poll: `close` waits for the serving loop's next look (the default 0.5 s ended every job late)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name=name, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def authorized(header: str | None, token: str) -> bool:
    """Whether an `Authorization` header carries `token` (`Bearer <token>`)."""
    scheme, _, given = (header or "").partition(" ")
    return scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class JsonHandler(BaseHTTPRequestHandler):
    """Routing, the token check and JSON replies; a subclass names its pages and actions."""

    server_version = "epochal"
    pages: ClassVar[dict[str, Route]] = {}  # GET path → the method that answers it
    actions: ClassVar[dict[str, Route]] = {}  # POST path → the method that carries it out
    missing = "no such page"  # the 404's words

    def token(self) -> str | None:
        """The secret actions need (None: no action is served)."""
        return None

    def refusals(self) -> Refusals | None:
        """Where a refused action is counted."""
        return None

    def page(self, path: str) -> Route | None:
        return self.pages.get("/status" if path.rstrip("/") == "/status" else path)

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        url = urllib.parse.urlsplit(self.path)
        if (route := self.page(url.path)) is not None:
            route(self, url)
        elif (file := static(url.path)) is not None:
            self.send(HTTPStatus.OK, *file)
        else:
            self.reply(HTTPStatus.NOT_FOUND, {"error": f"{self.missing}: {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        url = urllib.parse.urlsplit(self.path)
        action = url.path.rstrip("/")
        token = self.token()
        if (route := self.actions.get(action)) is None:
            self.reply(HTTPStatus.NOT_FOUND, {"error": f"no such action: {self.path}"})
        elif token is None or not authorized(self.headers.get("Authorization"), token):
            if (refusals := self.refusals()) is not None:
                refusals.add(refusal("control endpoint", self.client_address, f"POST {action} without the job's token"))
            self.reply(HTTPStatus.UNAUTHORIZED, {"error": "actions need the job's token (Authorization: Bearer ...)"})
        else:
            route(self, url)

    def reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        self.send(status, "application/json", json.dumps(body).encode())

    def send(self, status: HTTPStatus, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


# -- the dashboard's files --------------------------------------------------------------------------
DASHBOARD = Path(__file__).with_name("dashboard")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def static(path: str) -> tuple[str, bytes] | None:
    """The content type and bytes of a dashboard file (`/` is its page), or None: only the
    files of `cluster/dashboard/` itself are served, by name."""
    name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/dashboard/")
    if name == path or "/" in name or name.startswith(".") or Path(name).suffix not in _TYPES:
        return None
    file = DASHBOARD / name
    if not file.is_file():
        return None
    return _TYPES[file.suffix], file.read_bytes()
