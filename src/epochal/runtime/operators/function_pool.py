"""Vertical elasticity (ChronoStream §III-D): a stateless operator's user function in a pool
of processes of its own, resized while the job runs, with no state moved.

ChronoStream gives a resource container more cores by rewriting its *thread-control table*:
which OS threads run which computation slices, with the slices' state where it was. Python's
threads share one interpreter lock, so here the unit that can use another core is a process:
`map`, `filter` and `flat_map` with `processes=n` run their function in `n` helper processes
(`pool_worker`), and `JobHandle.resize(uid, n)` changes `n` live. The pool is the subtask's
thread-control table: the records of a batch are cut into one contiguous chunk per ready
process, sent to all, and the answers are joined in the chunks' order, so the operator's output
is record for record what the function would give in line, and a barrier after the batch still
follows all of it (nothing of the pool is in a checkpoint: a stateless function has no state).

A resize starts the new processes and leaves them out of the rotation until they answered that
they loaded the function (start-up of a Python process: 0.1-0.5 s), so the subtask never waits
for them; a shrink closes the surplus processes' pipes between two batches, when none of them
holds work. A patch (`runtime.patches`) sends the new function to every process of the pool.

Only stateless functions: keyed state lives in the subtask's key groups, and a process pool
would have to ship it to its processes and back (the cost a key-group move pays once).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..patches import dump_function
from . import pool_worker

# the worker module alone, not the `epochal` package (whose imports would double its start-up)
_BOOT = ("import importlib.util as u; s = u.spec_from_file_location('epochal_pool_worker', "
         f"{pool_worker.__file__!r}); m = u.module_from_spec(s); s.loader.exec_module(m); m.main()")


@dataclass(slots=True)
class _Process:
    popen: subprocess.Popen[bytes]
    inbox: Connection  # what the process reads
    outbox: Connection  # what it answers on
    ready: bool = False


def _dump(fn: Any) -> bytes:
    """`fn` as a pool process can load it: by value when its module is no file a new process could
    import (a notebook cell's, a doc page's namespace), else as a patch ships (`dump_function`)."""
    module = sys.modules.get(str(getattr(fn, "__module__", None) or type(fn).__module__))
    if module is None or getattr(module, "__file__", None) is not None or module.__name__ in sys.builtin_module_names:
        return dump_function(fn)
    from pyspark import cloudpickle

    if module.__name__ == "__main__":  # cloudpickle ships __main__'s functions by value already
        return dump_function(fn)
    cloudpickle.register_pickle_by_value(module)
    try:
        return dump_function(fn)
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _start(payload: bytes) -> _Process:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    popen = subprocess.Popen(  # noqa: S603 - our own module, under this interpreter
        [sys.executable, "-c", _BOOT],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
    )
    assert popen.stdin is not None and popen.stdout is not None
    process = _Process(popen, Connection(os.dup(popen.stdin.fileno()), readable=False),
                       Connection(os.dup(popen.stdout.fileno()), writable=False))
    popen.stdin.close()
    popen.stdout.close()
    process.inbox.send_bytes(pickle.dumps(("fn", payload)))
    return process


def _stop(process: _Process) -> None:
    for end in (process.inbox, process.outbox):
        try:
            end.close()
        except OSError:
            pass
    try:
        process.popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.popen.kill()
        process.popen.wait()


def _stop_all(processes: list[_Process]) -> None:
    for process in processes:
        _stop(process)


class PoolError(RuntimeError):
    """A pool process died or answered nonsense: the attempt fails and restores."""


class FunctionPool:
    """`size` processes running one function; `apply` spreads a batch's records over the ready ones.

    Args:
        fn: the operator's function (shipped as `runtime.patches.dump_function` ships a patch).
        size: how many processes (at least 1).
        kind: "map", "filter" or "flat_map".
    """

    def __init__(self, fn: Any, size: int, kind: str) -> None:
        self.fn = fn
        self.kind = kind
        self._payload = _dump(fn)
        self.processes: list[_Process] = []
        self._finalizer = weakref.finalize(self, _stop_all, self.processes)
        self.resize(size)

    @property
    def size(self) -> int:
        return len(self.processes)

    @property
    def ready(self) -> int:
        return sum(1 for p in self.processes if p.ready)

    def poll_ready(self) -> int:
        """How many processes loaded the function, taking the answers that came meanwhile."""
        for process in self.processes:
            if not process.ready and process.outbox.poll(0):
                self._await_ready(process)
        return self.ready

    def resize(self, size: int) -> None:
        """Run `size` processes from now on: new ones join once they loaded the function."""
        if size < 1:
            raise ValueError(f"a function pool needs at least 1 process, got {size}")
        while len(self.processes) < size:
            self.processes.append(_start(self._payload))
        while len(self.processes) > size:  # the newest first: those least likely to be ready
            _stop(self.processes.pop())

    def set_function(self, fn: Any) -> None:
        """A patch: every process runs `fn` from the next batch on."""
        self.fn, self._payload = fn, _dump(fn)
        for process in self.processes:
            self._await_ready(process)
            process.inbox.send_bytes(pickle.dumps(("fn", self._payload)))
            process.ready = False
            self._await_ready(process)

    def apply(self, records: list[Any], tolerant: bool) -> tuple[Any, ...]:
        """The function over `records`, in order: ("ok", out, failures) or ("error", index, error)."""
        ready = self._ready()
        n = max(1, min(len(ready), len(records)))
        step, extra = divmod(len(records), n)
        chunks: list[tuple[int, _Process]] = []
        start = 0
        for i, process in enumerate(ready[:n]):
            end = start + step + (1 if i < extra else 0)
            process.inbox.send_bytes(pickle.dumps(("apply", self.kind, tolerant, records[start:end]),
                                                  protocol=pickle.HIGHEST_PROTOCOL))
            chunks.append((start, process))
            start = end
        out: list[Any] = []
        failures: list[tuple[int, BaseException]] = []
        error: tuple[Any, ...] | None = None
        for offset, process in chunks:  # every answer is read, so no process is left with one
            answer = self._receive(process)
            if answer[0] == "error":
                error = error or ("error", offset + answer[1], answer[2])
            elif error is None:
                out.extend(answer[1])
                failures.extend((offset + i, exc) for i, exc in answer[2])
        return error if error is not None else ("ok", out, failures)

    def close(self) -> None:
        self._finalizer()

    # -- internals -------------------------------------------------------------------------------
    def _ready(self) -> list[_Process]:
        """The processes that loaded the function; waits for the first if none did yet."""
        self.poll_ready()
        ready = [p for p in self.processes if p.ready]
        if not ready:
            self._await_ready(self.processes[0])
            ready = [self.processes[0]]
        return ready

    def _await_ready(self, process: _Process) -> None:
        if not process.ready:
            answer = self._receive(process)
            if answer != ("ok",):
                raise PoolError(f"a pool process did not load the function: {answer!r}")
            process.ready = True

    def _receive(self, process: _Process) -> tuple[Any, ...]:
        try:
            answer: tuple[Any, ...] = pickle.loads(process.outbox.recv_bytes())
        except (EOFError, OSError) as exc:
            raise PoolError(f"a process of the pool ended (exit code {process.popen.poll()})") from exc
        return answer
