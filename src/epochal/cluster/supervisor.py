"""A Spark task's supervisor: the worker runs in a child process, replaced when it is killed.

Spark never retries a barrier stage, and any task's death fails all of it, so without this a
worker killed by SIGKILL or the OOM killer costs the job a new stage: every worker starts again
and reads all its state back from storage. ChronoStream §III-E recovers from a lost container
without stopping the others; here the Spark task (the PySpark worker process) outlives its
Epochal worker: it forks the worker, waits for it, and forks a new *incarnation* when it was
killed by a signal. The child inherits the task's listening socket, so its peers reconnect to
the address they already know, and the job master restarts the attempt in place
(`cluster.stage_host`), with the stage, the other workers' processes and their links untouched.

A worker that exits with an error fails the task, as before: the supervisor re-raises its
error, whose text (e.g. `UNREACHABLE`) the job master reads in the stage's failure. The child
dies with the supervisor (`PR_SET_PDEATHSIG` on Linux), so a cancelled or lost task leaves no
worker behind. Without `os.fork` (not POSIX) the worker runs in the task's own process.

What a worker would import lazily in its first batch is imported here, before the fork
(`preload`): every incarnation inherits it, and the PySpark worker process that hosts the task is
reused from job to job, so the cost is paid once, not in every job's and every recovery's first
second.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable

from ..errors import EpochalError

log = logging.getLogger(__name__)


class WorkerProcessFailed(EpochalError):
    """The worker process raised, or was replaced more often than the job may restart."""


def supervise(run: Callable[[int], None], max_replacements: int) -> int:
    """Run `run(incarnation)` in a child process until it returns; returns the incarnations used.

    A child killed by a signal is replaced by `run(incarnation + 1)`, at most `max_replacements`
    times (the job master's restart budget bounds recovery anyway; this bounds a loop of deaths
    the job master cannot see). A child that raised fails the supervisor with its traceback.
    """
    if not hasattr(os, "fork"):
        run(0)
        return 1
    preload()
    incarnation = 0
    while True:
        read_end, write_end = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(read_end)
            os._exit(_child(run, incarnation, parent, write_end))
        os.close(write_end)
        error = _read_all(read_end)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return incarnation + 1
        if os.WIFSIGNALED(status) and incarnation < max_replacements:
            log.warning(
                "worker process %d (incarnation %d) was killed by signal %d; starting a new one",
                pid, incarnation, os.WTERMSIG(status),
            )
            incarnation += 1
            continue
        if os.WIFSIGNALED(status):
            error = error or f"killed by signal {os.WTERMSIG(status)} after {incarnation} replacements"
        raise WorkerProcessFailed(_summary(error) if error else f"the worker process ended with status {status}")


def preload() -> None:
    """Make the imports a worker's first batch would make. pyarrow imports pandas (when it is
    installed, as it is beside PySpark) the first time it converts a numpy array or a Python
    value: 0.3-0.5 s, measured as a tenth of a 1.5 s word count on Spark when each job's forked
    worker paid it."""
    import numpy as np
    import pyarrow as pa

    pa.array(np.zeros(1, dtype=np.int64), pa.int64())


def _child(run: Callable[[int], None], incarnation: int, parent: int, errors: int) -> int:
    """The worker's process: its exit status (0: done), its error's traceback to `errors`."""
    try:
        _die_with(parent)
        run(incarnation)
        code = 0
    except BaseException:  # noqa: BLE001 - everything goes to the supervisor
        os.write(errors, traceback.format_exc().encode(errors="replace")[-65536:])
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os.close(errors)
    return code


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when the supervisor dies (Linux), so a stage Spark
    cancels or loses leaves no worker holding its ports."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


def _summary(error: str) -> str:
    """The child's error first (the line Spark's failure shows), then its traceback."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Traceback"):
        return error
    return f"{lines[-1]}\n(the worker process's {error.strip()})"


def _read_all(fd: int) -> str:
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")
