"""One process of a function pool (`function_pool`): runs the operator's function on the
records it is sent and sends back what it produced, in the order it was sent them.

Started from this file alone (not the `epochal` package: `function_pool._BOOT`): its stdin brings frames, and its
original stdout carries the answers (fd 1 is pointed at stderr, so a user function's prints
cannot corrupt a frame). It ends when its stdin closes, which is also what happens when the
process that started it dies: a SIGKILLed worker leaves no pool process behind.

Frames (pickled): `("fn", payload)` loads a function (answer `("ok",)`); `("apply", kind,
tolerant, records)` answers `("ok", out, failures)`, where `failures` lists `(index, error)`
of the records the function raised on under a tolerant policy, or `("error", index, error)`
for the first one under `on_error="fail"`.
"""

from __future__ import annotations

import os
import pickle
import sys
from multiprocessing.connection import Connection
from typing import Any

MAP, FILTER, FLAT_MAP = "map", "filter", "flat_map"


def _portable(error: BaseException) -> BaseException:
    """The error itself if it pickles, else a RuntimeError that names it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def apply(fn: Any, kind: str, tolerant: bool, records: list[Any]) -> tuple[Any, ...]:
    """What the operator's function makes of `records` (the per-record loop of `stateless`)."""
    out: list[Any] = []
    failures: list[tuple[int, BaseException]] = []
    for i, record in enumerate(records):
        try:
            if kind == MAP:
                out.append(fn(record))
            elif kind == FILTER:
                if fn(record):
                    out.append(record)
            else:
                produced = fn(record)
                if type(produced) is not list and type(produced) is not tuple:
                    produced = list(produced)  # a generator may raise half-way: all or nothing
                out.extend(produced)
        except Exception as exc:
            if not tolerant:
                return ("error", i, _portable(exc))
            failures.append((i, _portable(exc)))
    return ("ok", out, failures)


def serve(inbox: Connection, outbox: Connection) -> None:
    fn: Any = None
    while True:
        try:
            frame = pickle.loads(inbox.recv_bytes())
        except (EOFError, OSError):
            return
        if frame[0] == "fn":
            fn = pickle.loads(frame[1])
            answer: tuple[Any, ...] = ("ok",)
        else:
            answer = apply(fn, frame[1], frame[2], frame[3])
        try:
            outbox.send_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # the pool let this process go before it was ready (a shrink): done
            return


def main() -> None:
    answers = os.dup(1)
    os.dup2(2, 1)  # the user function's prints go to stderr, never into a frame
    sys.stdout = sys.stderr
    serve(Connection(0, writable=False), Connection(answers, readable=False))


if __name__ == "__main__":
    main()
