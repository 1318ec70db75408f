"""A live logic patch over HTTP: `epochal patch URL UID FILE.py:NAME` and `POST /patch?uid=UID`.

The CLI loads the new function where the user is (`path/to/fix.py:name`, by value, as Spark
ships a UDF defined in a script; or `package.module:name`, by reference: the workers must import
it) and posts it pickled; the endpoint, which only the job's token opens, unpickles it and
submits the patch (`runtime.patches`). Whoever holds the token can run code in the job: a patch
is code by design, as `cancel` can lose a day of work.
"""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys
from http import HTTPStatus
from typing import Any

from ..errors import EpochalError
from ..runtime.commands import Patch
from ..runtime.master.control import JobControl
from ..runtime.patches import dump_function

COMMAND_TIMEOUT = 300.0  # seconds a patch request waits for its checkpoint


def load_reference(reference: str) -> Any:
    """The object `FILE.py:NAME` or `MODULE:NAME` names.

    Raises:
        EpochalError: a malformed reference, a file or module that does not load, no such name.
    """
    where, sep, name = reference.rpartition(":")
    if not sep or not where or not name:
        raise EpochalError(f"name the function as FILE.py:NAME or MODULE:NAME, got {reference!r}")
    try:
        if where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"epochal_patch_{abs(hash(where))}", where)
            if spec is None or spec.loader is None:
                raise EpochalError(f"cannot load {where}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            from pyspark import cloudpickle

            cloudpickle.register_pickle_by_value(module)  # the workers cannot import a script
        else:
            module = importlib.import_module(where)
    except EpochalError:
        raise
    except Exception as exc:
        raise EpochalError(f"cannot load {where}: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, name):
        raise EpochalError(f"{where} has no {name!r}")
    return getattr(module, name)


def request_body(reference: str) -> bytes:
    """What `epochal patch` posts: the function `reference` names, pickled."""
    return dump_function(load_reference(reference))


def answer(control: JobControl, uid: str, body: bytes) -> tuple[HTTPStatus, dict[str, Any]]:
    """The endpoint's answer to `POST /patch?uid=UID` with a pickled function: once the patch's
    checkpoint completed, or why it was refused."""
    if not uid:
        return HTTPStatus.BAD_REQUEST, {"error": "patch needs ?uid=..."}
    try:
        function = pickle.loads(body)
        command = Patch(uid, function)
    except Exception as exc:  # noqa: BLE001 - a body that is no function: said, not raised
        return HTTPStatus.BAD_REQUEST, {"error": f"the request holds no function: {type(exc).__name__}: {exc}"}
    try:
        checkpoint = control.submit(command).wait(COMMAND_TIMEOUT)
    except TimeoutError as exc:
        return HTTPStatus.GATEWAY_TIMEOUT, {"error": str(exc)}
    except (EpochalError, TypeError, ValueError) as exc:
        return HTTPStatus.CONFLICT, {"error": str(exc)}
    return HTTPStatus.OK, {"patch": checkpoint, "uid": uid, "status": control.status().to_json()}
