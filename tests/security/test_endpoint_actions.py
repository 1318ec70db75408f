"""The control endpoint against a caller without the job's token (no Spark): every action main
has (cancel, rescale, savepoint, move, a live patch whose body is a pickled function) is refused
with 401, counted with the caller's address, and its body is never unpickled; with the token a
patch's body is read (and here refused for naming no operator), so the refusal is the token's."""

from __future__ import annotations

import http.client
from pathlib import Path

import hostile

from epochal.cluster.endpoint import ControlEndpoint
from epochal.runtime.master.control import JobControl

ACTIONS = ("/cancel", "/rescale?parallelism=1", "/savepoint?target=/tmp/x", "/move?uid=count&group=0", "/patch?uid=map",
           "/resize?uid=map&processes=2")


def _post(endpoint: ControlEndpoint, action: str, body: bytes, headers: dict[str, str]) -> int:
    host, _, port = endpoint.url.removeprefix("http://").rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("POST", action, body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_every_action_without_the_token_is_refused_counted_and_its_body_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    control = JobControl("job", 2)
    endpoint = ControlEndpoint(control)
    try:
        assert endpoint.url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
        statuses = [
            _post(endpoint, action, hostile.evil_pickle(str(marker)), headers)
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {endpoint.token}"})
            for action in ACTIONS
        ]
        assert statuses == [401] * (3 * len(ACTIONS))
        assert not marker.exists()
        assert control.refusals.count == 3 * len(ACTIONS)
        assert set(control.refusals.by_port()) == {"control endpoint"}
        assert all("without the job's token" in r.reason for r in control.refusals.recent())
        status = _post(endpoint, "/patch?uid=map", b"not a pickle", {"Authorization": f"Bearer {endpoint.token}"})
        assert status != 401 and control.refusals.count == 3 * len(ACTIONS)  # the token passes
    finally:
        endpoint.close()
