"""A Nexmark query that declares the fields it uses (`READS`) gives the same results reading only
those columns of the Parquet files as reading all of them (`harness.file_stream`, `flat.unflatten`
of some columns): what lets it read as little as Spark does."""

from __future__ import annotations

import collections
import types
from pathlib import Path
from typing import Any

import pytest

from epochal import StreamEnvironment
from epochal.connectors.nexmark.flat import flat_columns
from epochal.connectors.nexmark.schema import EventKind
from epochal.testing import CollectSink
from example_modules import load_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nexmark"
WITH_READS = ["q0", "q1", "q2", "q3", "q5", "q7", "q8", "q11"]


HARNESS = load_module(EXAMPLES / "harness.py", "nexmark_harness_reads")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("nexmark-files"))
    HARNESS.write_files(directory, 30_000, seed=4, file_events=10_000)
    return directory


def _results(module: types.ModuleType, files: str, columns: list[str] | None) -> collections.Counter[str]:
    env = StreamEnvironment(parallelism=2, executor="inprocess")
    sink = CollectSink()
    module.query(HARNESS.file_stream(env, files, columns)).sink_to(sink)
    env.execute(f"reads-{module.NAME}")
    return collections.Counter(repr(_plain(r)) for r in sink.committed())


def _plain(record: Any) -> Any:
    return tuple(record.values()) if isinstance(record, dict) else tuple(record)


@pytest.mark.parametrize("name", WITH_READS)
def test_reading_only_the_columns_a_query_uses_gives_its_results(name: str, files: str) -> None:
    module = HARNESS.load(EXAMPLES / f"{name}.py")
    assert module.READS[:2] == ["kind", "dateTime"] and len(module.READS) < 12  # some, not all
    some = _results(module, files, module.READS)
    assert some == _results(module, files, None)
    assert sum(some.values()) > 0


def test_flat_columns_names_the_prefixed_fields_once_each() -> None:
    got = flat_columns({EventKind.BID: ["auction", "dateTime"], EventKind.PERSON: ["id"]})
    assert got == ["kind", "dateTime", "b_auction", "p_id"]
