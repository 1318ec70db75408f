"""A function pool's resize over HTTP: `epochal resize URL UID N` and
`POST /resize?uid=UID&processes=N` (vertical elasticity, `runtime.operators.function_pool`).

Answered once every subtask of the operator said its pool runs `N` processes with the function
loaded (`runtime.master.pools`), as `JobHandle.resize` returns, or with why it was refused: no
such operator, one without a pool, a job that is not running.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from ..errors import EpochalError
from ..runtime.commands import Resize
from ..runtime.master.control import JobControl

COMMAND_TIMEOUT = 300.0  # seconds a resize request waits for the pools (a process starts in 0.1-2 s)


def answer(control: JobControl, query: dict[str, list[str]]) -> tuple[HTTPStatus, dict[str, Any]]:
    """The endpoint's answer to `POST /resize?uid=UID&processes=N`."""
    uid, given = query.get("uid", [""])[0], query.get("processes", [""])[0]
    if not uid or not given:
        return HTTPStatus.BAD_REQUEST, {"error": "resize needs ?uid=UID&processes=N"}
    try:
        command = Resize(uid, int(given))
    except ValueError:
        return HTTPStatus.BAD_REQUEST, {"error": f"processes must be a positive integer, got {given!r}"}
    try:
        processes = control.submit(command).wait(COMMAND_TIMEOUT)
    except TimeoutError as exc:
        return HTTPStatus.GATEWAY_TIMEOUT, {"error": str(exc)}
    except (EpochalError, ValueError) as exc:
        return HTTPStatus.CONFLICT, {"error": str(exc)}
    return HTTPStatus.OK, {"resize": processes, "uid": uid, "status": control.status().to_json()}
