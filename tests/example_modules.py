"""Import an example's module (e.g. examples/nexmark/harness.py) by its file path, for tests."""

from __future__ import annotations

import importlib.util
import os
import sys
import types


def load_module(path: str | os.PathLike[str], name: str) -> types.ModuleType:
    """The module at `path`, registered as `name` (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
