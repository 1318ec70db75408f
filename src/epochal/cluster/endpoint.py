"""The job's control endpoint: HTTP on the job master's host, for the CLI, scripts and browsers.

One small server per job, started by the host next to its job master (on the driver for Spark),
serving the job's `JobControl`. Reading is open (`GET /status`); acting (`POST /cancel`) needs
the token the job prints at start, sent as `Authorization: Bearer <token>`, because whoever can
cancel a job can lose a day of a team's work. It binds 127.0.0.1 unless told otherwise, so
nothing off the machine reaches it by accident.

The standard library's threading server is enough: a handful of requests a second, none on a
hot path, and no dependency to keep.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import urllib.error
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import EpochalError
from ..runtime.control import JobControl

log = logging.getLogger(__name__)


class ControlEndpoint:
    """Serves one job's control over HTTP until `close()`.

    Args:
        control: the job's mailbox.
        host: the interface to bind; 127.0.0.1 keeps it on this machine.
        port: 0 picks a free port.
        token: the secret actions need; a fresh random one when None.
    """

    def __init__(self, control: JobControl, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.control = control
        self.token = token if token is not None else secrets.token_urlsafe(18)
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="epochal-endpoint", daemon=True)
        self._thread.start()
        log.info("job %r: control endpoint at %s", control.status().job, self.url)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def authorized(self, header: str | None) -> bool:
        scheme, _, given = (header or "").partition(" ")
        return scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(endpoint: ControlEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "epochal"

        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            if self.path.rstrip("/") == "/status":
                self._reply(HTTPStatus.OK, endpoint.control.status().to_json())
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such page: {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/cancel":
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such action: {self.path}"})
            elif not endpoint.authorized(self.headers.get("Authorization")):
                refused = "actions need the job's token (Authorization: Bearer ...)"
                self._reply(HTTPStatus.UNAUTHORIZED, {"error": refused})
            else:
                accepted = endpoint.control.request_cancel()
                self._reply(HTTPStatus.ACCEPTED if accepted else HTTPStatus.CONFLICT,
                            {"cancel": accepted, "status": endpoint.control.status().to_json()})

        def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
            log.debug("endpoint: " + format, *args)

    return Handler


# -- the client side: what `epochal status` and `epochal cancel` call ----------------------------------


def call(url: str, path: str, token: str | None = None, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    """`GET url+path` (or `POST` with the token when given): the HTTP status and the JSON body.

    Raises:
        EpochalError: nothing answers at `url`, or what answers is not a job's endpoint.
    """
    request = urllib.request.Request(url.rstrip("/") + path, method="GET" if token is None else "POST",
                                     data=None if token is None else b"")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read())
        except ValueError:
            raise EpochalError(f"{url} answered {error.code} but is not an Epochal job") from error
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EpochalError(f"cannot reach a job at {url} ({reason})") from exc
