"""Typed streams: mypy infers record types through a program (tests/api/typing_sample.py).

The sample says on each line what `reveal_type` must show (`# T:`) or which error mypy must
report (`# E:`); every other line must check clean under `--strict`. A change that loses a
type (a method returning a bare `DataStream`, an overload that no longer matches) fails here,
as pandas-stubs and Bytewax test their types.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

SAMPLE = Path(__file__).with_name("typing_sample.py")
_MODULES = re.compile(r"\bepochal(?:\.[a-z_]+)+\.")  # epochal.api.stream.DataStream -> DataStream
_LINE = re.compile(r"^.*typing_sample\.py:(\d+): (error|note): (.*?)(?:  \[([a-z-]+)\])?$")


def _expectations() -> tuple[dict[int, str], dict[int, str]]:
    types: dict[int, str] = {}
    errors: dict[int, str] = {}
    for n, line in enumerate(SAMPLE.read_text().splitlines(), 1):
        if m := re.search(r"\S  # T: (.+)$", line):
            types[n] = m.group(1).strip()
        elif m := re.search(r"\S  # E: ([a-z-]+)$", line):
            errors[n] = m.group(1)
    return types, errors


def test_mypy_infers_record_types_through_streams() -> None:
    api = pytest.importorskip("mypy.api")
    out, err, _ = api.run([str(SAMPLE), "--strict", "--show-error-codes", "--no-error-summary",
                           "--no-pretty", "--hide-error-context"])
    assert not err, err
    revealed: dict[int, str] = {}
    codes: dict[int, set[str]] = defaultdict(set)
    for line in out.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        n, kind, text, code = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if kind == "note" and text.startswith("Revealed type is"):
            revealed[n] = _MODULES.sub("", text.split('"')[1]).replace("builtins.", "")
        elif kind == "error":
            codes[n].add(code or "?")
    types, errors = _expectations()
    assert len(types) >= 30 and len(errors) >= 8  # the sample is read: a broken pattern checks nothing
    wrong_types = {n: (want, revealed.get(n)) for n, want in types.items() if revealed.get(n) != want}
    missing_errors = {n: (want, sorted(codes.get(n, ()))) for n, want in errors.items() if want not in codes.get(n, ())}
    unexpected = {n: sorted(c) for n, c in codes.items() if n not in errors}
    assert not wrong_types, f"inferred types changed (line: (expected, revealed)): {wrong_types}\n{out}"
    assert not missing_errors, f"mypy no longer reports (line: (expected, got)): {missing_errors}\n{out}"
    assert not unexpected, f"errors on lines that must check clean: {unexpected}\n{out}"
