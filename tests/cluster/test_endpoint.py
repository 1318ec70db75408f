"""The control endpoint over real HTTP: status is open, actions need the job's token."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from epochal.cli.main import build_parser
from epochal.cluster.endpoint import ControlEndpoint, fresh_token
from epochal.runtime.master.control import JobControl, JobState


@pytest.fixture
def endpoint() -> Iterator[ControlEndpoint]:
    control = JobControl("clicks", parallelism=2)
    control.publish(state=JobState.RUNNING, attempt=1)
    served = ControlEndpoint(control)
    yield served
    served.close()


def _call(url: str, method: str = "GET", token: str | None = None) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_status_is_open_and_names_the_job(endpoint: ControlEndpoint) -> None:
    assert endpoint.url.startswith("http://127.0.0.1:")
    code, body = _call(endpoint.url + "/status")
    assert code == 200
    assert body["job"] == "clicks" and body["state"] == "running" and body["parallelism"] == 2


def test_an_action_without_the_token_is_refused(endpoint: ControlEndpoint) -> None:
    for token in (None, "wrong", endpoint.token + "x"):
        code, body = _call(endpoint.url + "/cancel", "POST", token)
        assert code == 401, body
    assert not endpoint.control.cancel_requested


def test_cancel_with_the_token_reaches_the_job(endpoint: ControlEndpoint) -> None:
    code, body = _call(endpoint.url + "/cancel", "POST", endpoint.token)
    assert code == 202 and body["cancel"] is True
    assert endpoint.control.cancel_requested


def test_a_finished_job_cannot_be_cancelled(endpoint: ControlEndpoint) -> None:
    endpoint.control.publish(state=JobState.FINISHED)
    code, body = _call(endpoint.url + "/cancel", "POST", endpoint.token)
    assert code == 409 and body["cancel"] is False


def test_waiting_for_the_end_wakes_when_the_job_master_publishes_it() -> None:
    control = JobControl("j", 1)
    threading.Timer(0.05, control.publish, kwargs={"state": JobState.FAILED}).start()
    assert control.wait_final(timeout=5).state is JobState.FAILED



def test_a_fresh_token_passes_as_a_command_line_argument() -> None:
    parser = build_parser()
    for token in (fresh_token() for _ in range(2000)):  # a URL-safe one starts with '-' 1 time in 64
        assert parser.parse_args(["cancel", "http://127.0.0.1:1", "--token", token]).token == token
