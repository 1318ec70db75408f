"""The optional libraries some connectors need, and the one line that says how to install them.

A connector whose library is an extra of the package (`pyproject.toml`'s optional
dependencies) says so when it is made, on the driver, before Spark starts: a bare
`ModuleNotFoundError` from inside a task, after the restarts, names neither the connector nor
the extra (issue 40). `epochal run` turns a job file's own import of such a library into the
same line (`cli.run`).
"""

from __future__ import annotations

import importlib.util

from ..errors import EpochalError

# top-level module -> the extra that installs it (pyproject.toml)
EXTRAS: dict[str, str] = {
    "deltalake": "delta",
    "nats": "nats",
    "redis": "redis",
    "hiredis": "redis",
    "fastavro": "avro",
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
}


def install_hint(extra: str) -> str:
    """How to install `extra`, from PyPI and from a clone of the repository."""
    return f"pip install 'epochal[{extra}]' (from a clone of the repository: pip install -e '.[{extra}]')"


def missing_extra(exc: BaseException) -> tuple[str, str] | None:
    """(module, extra) when `exc` is the import of an extra's library that is not installed."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".")[0]
    extra = EXTRAS.get(module)
    return None if extra is None else (module, extra)


def require(module: str, user: str) -> None:
    """Fail in one line, naming `user` and the extra, if `module` (an extra's library) cannot be
    imported; looks the module up without importing it (no import's cost at construction).

    Raises:
        EpochalError: the module is not installed.
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a stub left in sys.modules (None), or a broken install
        found = False
    if not found:
        raise EpochalError(f"{user} needs the {module} library: {install_hint(EXTRAS[module])}")


__all__ = ["EXTRAS", "install_hint", "missing_extra", "require"]
