"""The public surface of `epochal`: exactly the names in `__all__`, each documented and
presented under the `epochal` module (httpx's tests/test_exported_members.py, trio's exports test).
"""

from __future__ import annotations

import inspect
import types

import pytest

import epochal


def _public_names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def _own_docstring(obj: object) -> str | None:
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not doc or not doc.strip():
        return None
    name = getattr(obj, "__name__", "")
    if doc.startswith(f"{name}("):  # the signature dataclasses write when a class has no docstring
        return None
    return doc


def test_all_is_exactly_the_public_names():
    assert set(epochal.__all__) == _public_names(epochal)


def test_all_is_sorted_without_duplicates():
    assert list(epochal.__all__) == sorted(set(epochal.__all__))


def test_star_import_gives_all():
    namespace: dict = {}
    exec("from epochal import *", namespace)
    assert {n for n in namespace if n != "__builtins__"} == set(epochal.__all__)


@pytest.mark.parametrize("name", epochal.__all__)
def test_every_public_name_has_a_docstring(name):
    assert _own_docstring(getattr(epochal, name)), f"epochal.{name} has no docstring of its own"


@pytest.mark.parametrize("name", epochal.__all__)
def test_every_public_name_belongs_to_epochal(name):
    assert getattr(epochal, name).__module__ == "epochal"


def test_the_issue_contract_is_public():
    """The names and methods the issue's API contract uses."""
    from epochal.connectors import FileSink, TextFileSource  # noqa: F401
    from epochal.testing import CollectSink, Crash, ListSource  # noqa: F401

    for name in ("StreamEnvironment", "CheckpointConfig", "DataStream", "KeyedStream", "AggregateFunction",
                 "KeyedProcessFunction", "ValueState", "ListState", "MapState", "JobFailedError", "GraphError"):
        assert name in epochal.__all__
    stream_methods = {"map", "filter", "flat_map", "map_batches", "key_by", "union", "rebalance", "broadcast",
                      "forward", "set_parallelism", "sink_to", "uid", "named"}
    assert stream_methods <= set(dir(epochal.DataStream))
    assert {"count", "reduce", "aggregate", "process"} <= set(dir(epochal.KeyedStream))
    assert issubclass(epochal.KeyedStream, epochal.DataStream)
    assert {"from_source", "execute", "job_graph"} <= set(dir(epochal.StreamEnvironment))


def test_errors_share_one_base():
    errors = [getattr(epochal, n) for n in epochal.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, epochal.EpochalError) for e in errors)


def _undocumented_members() -> list[str]:
    missing = []
    for name in epochal.__all__:
        obj = getattr(epochal, name)
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            target = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if callable(target) and not (getattr(target, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    return sorted(missing)


def test_every_public_method_has_a_docstring():
    assert _undocumented_members() == []


def _protocol_members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items() if not name.startswith("_")}


def test_the_runtime_context_is_a_process_context():
    """The context a keyed process function gets conforms to `epochal.ProcessContext`: every member,
    with the protocol's parameters (the runtime implements it structurally: it may not import api)."""
    from epochal.testing import CollectSink, ListSource

    seen: list[object] = []

    class Probe(epochal.KeyedProcessFunction):
        def open(self, ctx):
            seen.append(ctx)

        def process_element(self, value, ctx):
            yield (ctx.key, ctx.subtask)

    env = epochal.StreamEnvironment(1, executor="inprocess", restart=epochal.RestartStrategy.none())
    sink = CollectSink()
    env.from_source(ListSource(["a"])).key_by(lambda r: r).process(Probe()).sink_to(sink)
    env.execute("probe")
    assert sink.committed() == [("a", 0)]
    (ctx,) = seen
    assert isinstance(ctx, epochal.ProcessContext)
    members = _protocol_members(epochal.ProcessContext)
    assert {"key", "subtask", "value_state", "list_state", "map_state", "current_processing_time",
            "register_processing_time_timer", "delete_processing_time_timer", "timers", "time_domain",
            "current_watermark", "parallelism", "operator_list_state", "output"} == set(members)
    assert isinstance(ctx.timers, epochal.api.context.Timers)
    for name, member in members.items():
        implemented = inspect.getattr_static(type(ctx), name)
        if isinstance(member, property):
            assert isinstance(implemented, property), f"{name} is a property of ProcessContext"
            continue
        expected = [(p.name, p.default) for p in inspect.signature(member).parameters.values()]
        actual = [(p.name, p.default) for p in inspect.signature(implemented).parameters.values()]
        assert actual == expected, f"ProcessContext.{name}"
