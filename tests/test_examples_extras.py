"""An example whose library is an extra of the package, run without it, ends in one line naming
the extra to install, within seconds and before any server or job starts (issue 40: a bare
`ModuleNotFoundError: deltalake`); every other example needs no extra. The connectors of the
extras say the same when they are made (`connectors.extras.require`)."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from epochal.cli.main import main
from epochal.errors import EpochalError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# example -> (a library it needs, the extra that installs it)
NEEDS: dict[str, list[tuple[str, str]]] = {
    "watched_sales_to_delta": [("deltalake", "delta")],
    "orders_cdc_to_postgres": [("psycopg", "postgres")],
    "clickstream_sessions": [("nats", "nats"), ("psycopg", "postgres")],
}
# what an example using an extra would name in its source
_EXTRA_WORDS = re.compile(r"\b(deltalake|psycopg|nats|redis|fastavro|Delta(Sink|Source)|Postgres\w*|JetStream\w*|"
                          r"RedisStream\w*|AvroFormat)\b")


def _examples() -> list[Path]:
    return sorted([*EXAMPLES.glob("*.py"), *(EXAMPLES / "nexmark").glob("*.py")])


def test_only_the_listed_examples_use_an_extra() -> None:
    using = {p.stem for p in _examples() if _EXTRA_WORDS.search(p.read_text(encoding="utf-8"))}
    assert using == set(NEEDS), "an example that uses an extra must be listed in NEEDS (and tested below)"


@pytest.mark.parametrize("name,module,extra", [(n, m, e) for n, needs in NEEDS.items() for m, e in needs])
def test_an_example_without_its_extra_ends_in_one_line_naming_it(
    name: str, module: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("EPOCHAL_EXAMPLE_DSN", raising=False)
    for loaded in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed: its import fails
    started = time.process_time()
    try:
        code: Any = main(["run", str(EXAMPLES / f"{name}.py"), "--executor", "inprocess"])
        message = capsys.readouterr().err
    except SystemExit as ended:  # the example said it itself (also when run with plain python)
        code, message = 1, str(ended.code)
    assert time.process_time() - started < 5, "it started work before it found the library missing"
    assert code == 1
    lines = message.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"pip install 'epochal[{extra}]'" in lines[0] and module in lines[0]
    assert not os.listdir(tmp_path), "it started before it found the library missing"


@pytest.mark.parametrize("connector,module,extra", [
    ("JetStreamSource", "nats", "nats"), ("JetStreamSink", "nats", "nats"),
    ("RedisStreamSource", "redis", "redis"), ("RedisStreamSink", "redis", "redis"),
    ("PostgresSink", "psycopg", "postgres"), ("PostgresCdcSource", "psycopg", "postgres"),
    ("AvroFormat", "fastavro", "avro"),
])
def test_a_connector_made_without_its_extra_names_it(
    connector: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from epochal.connectors.extras import require

    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(EpochalError, match=re.escape(f"{connector} needs the {module} library: pip install "
                                                     f"'epochal[{extra}]'")):
        require(module, connector)
    import epochal.connectors.jetstream as jetstream
    import epochal.connectors.log as log
    import epochal.connectors.postgres as postgres
    import epochal.connectors.redis_streams as redis_streams

    fmt = log.JsonFormat(pa.schema([("a", pa.int64())]))
    make: dict[str, Any] = {
        "JetStreamSource": lambda: jetstream.JetStreamSource("nats://127.0.0.1:1", "S", fmt),
        "JetStreamSink": lambda: jetstream.JetStreamSink("nats://127.0.0.1:1", "s", fmt),
        "RedisStreamSource": lambda: redis_streams.RedisStreamSource("redis://127.0.0.1:1", "s",
                                                                     fmt),
        "RedisStreamSink": lambda: redis_streams.RedisStreamSink("redis://127.0.0.1:1", "s",
                                                                 fmt),
        "PostgresSink": lambda: postgres.PostgresSink("dbname=x", "t", key=("a",)),
        "PostgresCdcSource": lambda: postgres.PostgresCdcSource("dbname=x", tables=["t"]),
        "AvroFormat": lambda: log.AvroFormat({"type": "record", "name": "r", "fields": []}),
    }
    with pytest.raises(EpochalError, match=re.escape(f"pip install 'epochal[{extra}]'")):
        make[connector]()
