"""The examples in the API docstrings run, and print what they claim (Bytewax: docstrings that run).

`epochal/__init__.py` sets `__module__ = "epochal"` on the public classes, and the standard
`doctest.testmod` (like `pytest --doctest-modules`) skips classes whose `__module__` is not the
module being searched; so this test finds the examples itself, object by object.
"""

from __future__ import annotations

import doctest
import inspect
import types
from typing import Any

import pytest

import epochal.api.functions
import epochal.api.stream
from epochal import StreamEnvironment
from epochal.runtime.result import JobResult

MODULES = [epochal.api.stream, epochal.api.functions]

# Docstrings known to carry an example; a test below fails if one stops being found or run.
EXPECTED_EXAMPLES = {
    "epochal.api.stream": {"DataStream"},
    "epochal.api.functions": {"KeyedProcessFunction", "AggregateFunction"},
}


def _defined_in(module: types.ModuleType, obj: object) -> bool:
    """Whether `obj` was written in `module`'s file (whatever its `__module__` says)."""
    if inspect.isfunction(obj):
        return obj.__globals__ is vars(module)
    if inspect.isclass(obj):
        return any(inspect.isfunction(v) and v.__globals__ is vars(module) for v in vars(obj).values())
    return False


def _doctests(module: types.ModuleType) -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    found = list(finder.find(module, module.__name__, globs=vars(module).copy()))
    for name, obj in vars(module).items():
        if not name.startswith("_") and _defined_in(module, obj):
            found.extend(finder.find(obj, f"{module.__name__}.{name}", module=module, globs=vars(module).copy()))
    unique: dict[str | None, doctest.DocTest] = {}
    for test in found:  # the same docstring may be reached twice (e.g. through `__test__`)
        if test.examples:
            unique.setdefault(test.docstring, test)
    return list(unique.values())


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples_pass(module: types.ModuleType) -> None:
    tests = _doctests(module)
    found = {part for t in tests for part in t.name.split(".")}
    assert EXPECTED_EXAMPLES[module.__name__] <= found
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted >= sum(len(t.examples) for t in tests) > 0
    assert results.failed == 0


def test_the_datastream_example_really_runs_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    (test,) = [t for t in _doctests(epochal.api.stream) if t.name.endswith(".DataStream")]
    assert any("[10, 20, 30]" in example.want for example in test.examples)
    executed: list[JobResult] = []
    execute = StreamEnvironment.execute

    def spy(self: StreamEnvironment, *args: Any, **kwargs: Any) -> JobResult:
        executed.append(execute(self, *args, **kwargs))
        return executed[-1]

    monkeypatch.setattr(StreamEnvironment, "execute", spy)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=0, attempted=len(test.examples))
    (result,) = executed
    assert result.job_name == "times-ten" and result.operator("map").records_in == 3


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_standard_doctest_tools_find_the_examples(module: types.ModuleType) -> None:
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    expected = sum(len(t.examples) for t in _doctests(module))
    assert results.attempted == expected > 0
    assert results.failed == 0
