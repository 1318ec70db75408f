"""Functions the function-pool tests run in pool processes: a module with nothing but the
standard library to import, so a pool process starts in a fraction of a second."""

from __future__ import annotations

import os


def square(x: int) -> int:
    return x * x


def odd(x: int) -> bool:
    return x % 2 == 1


def twice(x: int) -> list[int]:
    return [x, -x]


def by_pid(x: int) -> tuple[int, int]:
    return (x, os.getpid())


def fails_on_seven(x: int) -> int:
    if x % 7 == 0:
        raise ValueError(f"no sevens: {x}")
    return x


class FailsOnceAfter:
    """Tags with the pid, and fails once (across processes: a marker file) at a value past `at`."""

    def __init__(self, marker: str, at: int) -> None:
        self.marker, self.at = marker, at

    def __call__(self, x: int) -> tuple[int, int]:
        if x >= self.at and not os.path.exists(self.marker):
            with open(self.marker, "w"):
                pass
            raise RuntimeError("a failure after the resize")
        return (x, os.getpid())


def tag_old(x: int) -> tuple[int, str]:
    return (x, "old")


def tag_new(x: int) -> tuple[int, str]:
    return (x, "new")


class SaysWhereLoaded:
    """Tags with the pid, and leaves a file named by the pid in `directory` wherever it is loaded
    (unpickled, as a pool process loads its function): a test sees which processes run it."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, x: int) -> tuple[int, int]:
        return (x, os.getpid())

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__dict__.update(state)
        with open(os.path.join(self.directory, str(os.getpid())), "w"):
            pass
