"""Imports point one way between the layers of `src/epochal` (STYLE: "Imports point one way").

Every import in every module counts, including imports inside functions and under
`TYPE_CHECKING`: a lazy or type-only upward import still ties a lower layer to a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import epochal

PACKAGE_ROOT = Path(epochal.__file__).resolve().parent

# layer -> the epochal modules it must not import ("epochal" itself re-exports every layer)
FORBIDDEN: dict[str, set[str]] = {
    "plan": {"runtime", "cluster", "api", "connectors", "cli", "testing", "epochal"},
    "runtime": {"api", "cluster", "connectors", "cli", "testing", "epochal"},
    "cluster": {"api", "connectors", "cli", "testing", "epochal"},
    # SQL is a layer at the API's level: it builds DataStreams with the API and plan data; the API
    # reaches it only through the frontend the package registers (api/sql.py), never by import
    "sql": {"runtime", "cluster", "connectors", "cli", "testing", "epochal"},
    "api": {"sql", "connectors", "cli", "testing", "epochal"},
}
# `state` may import only these from epochal (and itself)
STATE_ALLOWED = {"state", "errors", "config"}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in a file; `from X import name` gives X.name too
    when that is a module of the package."""
    module = _module_name(path, root)
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append((node.lineno, base))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                relative = Path(*candidate.split(".")[1:]) if "." in candidate else Path()
                if (root / relative).with_suffix(".py").exists() or (root / relative / "__init__.py").exists():
                    out.append((node.lineno, candidate))
    return out


def _layer(module: str, root_name: str) -> str | None:
    """The layer of an epochal module: its first component below the package ("epochal" for the
    package itself), or None outside epochal."""
    parts = module.split(".")
    if parts[0] != root_name:
        return None
    return parts[1] if len(parts) > 1 else root_name


def layering_violations(root: Path) -> list[str]:
    root_name = root.name
    found = []
    for path in sorted(root.rglob("*.py")):
        importer = _module_name(path, root)
        layer = _layer(importer, root_name)
        if layer not in FORBIDDEN and layer != "state":
            continue
        for line, imported in _imports(path, root):
            target = _layer(imported, root_name)
            if target is None or target == layer:
                continue
            target_key = "epochal" if target == root_name else target
            if layer == "state":
                bad = target_key not in STATE_ALLOWED
            else:
                bad = target_key in FORBIDDEN[layer]
            if bad:
                found.append(f"{path.relative_to(root.parent)}:{line}: {layer} imports {imported}")
    return found


def layer_graph(root: Path) -> dict[str, set[str]]:
    """layer -> layers it imports (the package root excluded: it only re-exports)."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        layer = _layer(_module_name(path, root), root.name)
        if layer == root.name:
            continue
        for _, imported in _imports(path, root):
            target = _layer(imported, root.name)
            if target is not None and target != layer:
                graph.setdefault(layer, set()).add(target)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


# Inside runtime: the three wings (master: the job master's side; task: a task's side; wire: what
# both exchange), the running operators and the window algebra they use, and the shared modules
# directly in runtime/ (records and pure functions both wings read). Area -> areas it must not import.
# The job master reads committed window state for queries (`master.control`), so it may import
# `windowing`, the pure algebra, but never a task's or an operator's insides.
RUNTIME_AREAS = ("master", "task", "wire", "operators", "windowing")
RUNTIME_FORBIDDEN: dict[str, set[str]] = {
    "wire": {"shared", "master", "task", "operators", "windowing"},
    "shared": {"master", "task", "operators", "windowing"},
    "windowing": {"master", "task", "operators"},
    "operators": {"master", "task"},
    "task": {"master"},
    "master": {"task", "operators"},
}


def _runtime_area(module: str, root_name: str) -> str | None:
    """The area of a runtime module: its wing or sub-package, or "shared" for runtime/*.py."""
    parts = module.split(".")
    if parts[:2] != [root_name, "runtime"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in RUNTIME_AREAS else "shared"


def wing_violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "runtime").rglob("*.py")):
        area = _runtime_area(_module_name(path, root), root.name)
        if area is None:
            continue
        for line, imported in _imports(path, root):
            target = _runtime_area(imported, root.name)
            if target is not None and target != area and target in RUNTIME_FORBIDDEN[area]:
                found.append(f"{path.relative_to(root.parent)}:{line}: {area} imports {imported}")
    return found


def test_the_walk_sees_every_layer():
    layers = {_layer(_module_name(p, PACKAGE_ROOT), "epochal") for p in PACKAGE_ROOT.rglob("*.py")}
    assert {"api", "plan", "runtime", "state", "cluster", "connectors", "sql"} <= layers
    # and it sees real imports: runtime uses plan and state
    assert {"plan", "state"} <= layer_graph(PACKAGE_ROOT)["runtime"]


@pytest.mark.parametrize("layer", ["state", "plan", "runtime", "cluster", "sql", "api"])
def test_imports_point_one_way(layer):
    violations = [v for v in layering_violations(PACKAGE_ROOT) if f": {layer} imports " in v]
    assert violations == []


def test_runtime_wings_keep_out_of_each_others_insides():
    assert wing_violations(PACKAGE_ROOT) == []


def test_the_walk_sees_every_wing():
    areas = {_runtime_area(_module_name(p, PACKAGE_ROOT), "epochal") for p in (PACKAGE_ROOT / "runtime").rglob("*.py")}
    assert areas - {None} == {*RUNTIME_AREAS, "shared"}


def test_the_wing_checker_catches_a_wing_reaching_into_another(tmp_path):
    root = _write(
        tmp_path / "epochal",
        {
            "runtime/__init__.py": "",
            "runtime/clock.py": "from .task.task import Task\n",
            "runtime/wire/__init__.py": "",
            "runtime/wire/elements.py": "from ..clock import Clock\n",
            "runtime/task/__init__.py": "",
            "runtime/task/task.py": "from ..master.job_master import JobMaster\nfrom ..wire.elements import Barrier\n",
            "runtime/master/__init__.py": "",
            "runtime/master/job_master.py": (
                "def f():\n    from ..operators.keyed import KeyedOperator\n    from ..clock import Clock\n"
            ),
            "runtime/operators/__init__.py": "",
            "runtime/operators/keyed.py": "from ..windowing.table import SliceTable\n",
            "runtime/windowing/__init__.py": "",
            "runtime/windowing/table.py": "",
        },
    )
    assert sorted(v.split(": ", 1)[1] for v in wing_violations(root)) == [
        "master imports epochal.runtime.operators.keyed",
        "shared imports epochal.runtime.task.task",
        "task imports epochal.runtime.master.job_master",
        "wire imports epochal.runtime.clock",
    ]


def test_layers_form_no_cycle():
    assert _find_cycle(layer_graph(PACKAGE_ROOT)) is None


# -- the checker itself, on a made-up package --------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_catches_upward_imports(tmp_path):
    root = _write(
        tmp_path / "epochal",
        {
            "__init__.py": "from .api.stream import DataStream\n",
            "errors.py": "",
            "api/__init__.py": "",
            "api/stream.py": "from ..plan.specs import Spec\n",
            "plan/__init__.py": "",
            "plan/specs.py": "from ..errors import GraphError\nfrom ..api import stream\n",
            "state/__init__.py": "",
            "state/backend.py": "def f():\n    from epochal.runtime.task import Task\n",
            "state/ok.py": "from ..errors import CheckpointError\nfrom . import backend\n",
            "runtime/__init__.py": "",
            "runtime/task.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from epochal import DataStream\n"
            ),
            "cluster/__init__.py": "",
            "cluster/host.py": "import epochal.connectors.files\n",
        },
    )
    violations = layering_violations(root)
    assert sorted(v.split(": ", 1)[1] for v in violations) == [
        "cluster imports epochal.connectors.files",
        "plan imports epochal.api",
        "plan imports epochal.api.stream",
        "runtime imports epochal",
        "state imports epochal.runtime.task",
    ]
    graph = layer_graph(root)
    assert _find_cycle(graph) is not None  # api -> plan -> api
