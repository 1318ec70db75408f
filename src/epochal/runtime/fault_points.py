"""Fault points: named places inside Epochal where a test can make the process die (tests only).

Not a user feature. The chaos runner (`tests/chaos.py`) arms them to SIGKILL a worker at a
moment no outside signal can hit reliably: inside a checkpoint's asynchronous write, a sink's
commit, a restore. Each point is one call, `fault_point("checkpoint.write")`.

`EPOCHAL_FAULT_POINTS` arms them, read once, when this module is imported: comma-separated
`name:directory` entries, e.g. `checkpoint.write:/tmp/chaos/markers`. An armed point, the first
time any process reaches it, creates the marker file `directory/name` (atomically, `O_EXCL`)
and kills its own process with SIGKILL; once the marker exists the point does nothing, in every
process and every relaunch that shares the directory. Deleting the marker re-arms the point; a
test can create it beforehand to hold the point and delete it to arm it at a moment it picks.

Spark's Python workers take their environment from the JVM when their daemon starts, not from
the driver's `os.environ` later: set the variable before the session starts, or per job through
`SparkContext.environment` (a new value starts a new worker daemon that has it).

Disarmed (the variable unset or empty), a point costs a call and one global lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "EPOCHAL_FAULT_POINTS"


def parse(value: str) -> dict[str, str]:
    """`name:directory,…` → {name: directory}; empty entries are ignored."""
    armed: dict[str, str] = {}
    for entry in value.split(","):
        name, sep, directory = entry.strip().partition(":")
        if not entry.strip():
            continue
        if not sep or not name or not directory:
            raise ValueError(f"{ENV}: {entry!r} is not name:directory")
        armed[name] = directory
    return armed


_ARMED: dict[str, str] = parse(os.environ.get(ENV, ""))


def fault_point(name: str) -> None:
    """Die here (SIGKILL) if `name` is armed and no process has died here yet."""
    if not _ARMED:
        return
    directory = _ARMED.get(name)
    if directory is None:
        return
    os.makedirs(directory, exist_ok=True)
    try:
        fd = os.open(os.path.join(directory, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return  # fired already, or held by the test
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
