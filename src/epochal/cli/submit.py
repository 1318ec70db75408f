"""`epochal run JOB.py --service URL`: a job file sent to a running `epochal serve`.

The job runs in the service's process, on its warm SparkSession (`cli.service`); this client
sends the file's path (on the service's machine: the same one, or a shared filesystem), the
job's arguments and this working directory, then prints what the job prints, draws its progress
as `epochal run` does (a panel on a terminal), and exits with the job's status. Ctrl-C cancels
the job through its control endpoint (with the token the job printed), as `epochal cancel` does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from typing import Any

from ..errors import EpochalError
from ..runtime.result import JobProgress
from .progress import ProgressDisplay

SERVICE_TOKEN_ENV = "EPOCHAL_SERVICE_TOKEN"
_ANNOUNCED = re.compile(r"epochal: job '.*' at (http://\S+) \(token for actions: (\w+)\)")


def submit(args: argparse.Namespace) -> int:
    """Send `args.job` to the service at `args.service`; the job's exit status."""
    if args.master or args.verbose:
        raise EpochalError("--service runs the job on the service's own session: --master and --verbose are the "
                           "service's (epochal serve --master URL --verbose)")
    token = args.service_token or os.environ.get(SERVICE_TOKEN_ENV)
    if not token:
        raise EpochalError(f"--service needs the service's token: --service-token TOKEN or {SERVICE_TOKEN_ENV} "
                           "(epochal serve printed it)")
    options = {"parallelism": args.parallelism, "checkpoint_dir": args.checkpoint_dir,
               "from_checkpoint": args.from_checkpoint, "executor": args.executor,
               "allow_non_restored_state": args.allow_non_restored_state or None, "web_port": args.web_port}
    body = {"file": os.path.abspath(args.job), "args": list(args.job_args), "cwd": os.getcwd(),
            "options": {k: v for k, v in options.items() if v is not None}}
    request = urllib.request.Request(args.service.rstrip("/") + "/jobs", data=json.dumps(body).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {token}",
                                                             "Content-Type": "application/json"})
    try:
        response = urllib.request.urlopen(request, timeout=None)
    except urllib.error.HTTPError as error:
        raise EpochalError(f"the service at {args.service} refused the job: {_reason(error)}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise EpochalError(f"no service answers at {args.service} ({getattr(exc, 'reason', exc)})") from None
    return _follow(response)


def _follow(response: Any) -> int:
    """Print the job's output as it comes; its exit status (1 if the service went away first)."""
    display = ProgressDisplay()
    job_endpoint: tuple[str, str] | None = None
    try:
        with response:
            while line := response.readline():
                message = json.loads(line)
                if "progress" in message:
                    display(JobProgress(**message["progress"]))
                elif "out" in message:
                    sys.stdout.write(message["out"])
                    sys.stdout.flush()
                elif "err" in message:
                    if found := _ANNOUNCED.search(message["err"]):
                        job_endpoint = (found.group(1), found.group(2))
                    sys.stderr.write(message["err"])
                    sys.stderr.flush()
                elif "exit" in message:
                    return int(message["exit"])
    except KeyboardInterrupt:
        display.close()
        if job_endpoint is not None:
            from ..cluster.endpoint import call

            call(job_endpoint[0], "/cancel?wait=20", job_endpoint[1], timeout=30)
            print("epochal: cancelled the job on the service", file=sys.stderr)
        return 130
    finally:
        display.close()
    print("epochal: the service closed the connection before the job ended", file=sys.stderr)
    return 1


def _reason(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read()).get("error", error.code))
    except ValueError:
        return f"HTTP {error.code}"
