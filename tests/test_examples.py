"""Every example in `examples/` runs with `epochal run --executor inprocess` and commits the
output it promises: exact multisets where the output is deterministic.

Each example runs in a fresh working directory (they write `corpus/`, `out*/`, `ckpt*/` there),
twice in a row, as a user tries one again (issue 40: a second run failed, or wrote everything
twice): the output checked is the second run's, which must be one run's output.
"""

from __future__ import annotations

import collections
import importlib
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from epochal.cli.main import main
from epochal.connectors import read_committed

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _run(name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, times: int = 2) -> str:
    """Run `examples/<name>.py` in process `times` times in a row; return the last run's one-line
    summary (stdout)."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # `epochal run` replaces sys.argv
    lines: list[str] = []
    for run in range(times):
        capsys.readouterr()
        code = main(["run", os.path.join(EXAMPLES, f"{name}.py"), "--executor", "inprocess"])
        captured = capsys.readouterr()
        assert code == 0, f"run {run + 1} of {name}: {captured.err[-2000:]}"
        lines = captured.out.splitlines()
        assert len(lines) == 1, lines
    return lines[0]


def _committed(directory: str) -> collections.Counter[tuple[Any, ...]]:
    assert not [n for n in os.listdir(directory) if n.endswith(".inprogress")], "staged files left"
    return collections.Counter(tuple(r) for r in read_committed(directory))


def _running_counts(keys: list[Any]) -> collections.Counter[tuple[Any, ...]]:
    """The `(key, n)` updates of a running count: n = 1..count(key) for every key."""
    totals = collections.Counter(keys)
    return collections.Counter((k, n) for k, c in totals.items() for n in range(1, c + 1))


def _corpus_updates() -> collections.Counter[tuple[Any, ...]]:
    """The running-count updates of the words in `corpus/`."""
    words: list[str] = []
    for name in sorted(os.listdir("corpus")):
        with open(os.path.join("corpus", name)) as f:
            words.extend(w for line in f for w in line.split())
    return _running_counts(words)


def test_wordcount_and_columnar_wordcount_commit_the_same_updates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _run("wordcount", capsys, monkeypatch)  # writes the demo corpus
    assert summary.startswith("wordcount: 96,000 updates committed")
    summary = _run("columnar_wordcount", capsys, monkeypatch)  # reuses it
    assert summary.startswith("columnar_wordcount: 96,000 updates committed")

    expected = _corpus_updates()
    assert _committed("out") == expected
    assert _committed("out-columnar") == expected


def test_columnar_wordcount_writes_its_own_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert not os.path.exists("corpus")
    _run("columnar_wordcount", capsys, monkeypatch)
    assert os.listdir("corpus"), "no corpus written"
    committed = _committed("out-columnar")
    assert committed == _corpus_updates()  # the corpus it wrote is the one it counted
    assert sum(committed.values()) == 96_000


def test_sessions_with_timers_emits_every_session_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _run("sessions_with_timers", capsys, monkeypatch)
    assert summary.startswith("sessions: 6 sessions committed")
    expected = [("alice", 3), ("bob", 1), ("carol", 2), ("alice", 2), ("bob", 3), ("carol", 1)]
    assert _committed("out-sessions") == collections.Counter(expected)


def _sessions(clicks: list[tuple[str, float]], gap: float) -> list[tuple[str, float, float, int]]:
    """Sessions by their definition: per user, clicks sorted by time, cut where two are `gap` or
    more apart; a session spans its first click to its last plus the gap."""
    out: list[tuple[str, float, float, int]] = []
    for user in sorted({u for u, _ in clicks}):
        times = sorted(t for u, t in clicks if u == user)
        first = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] - times[i - 1] >= gap:
                out.append((user, times[first], times[i - 1] + gap, i - first))
                first = i
    return out


def _final_sessions(results: list[list[Any]]) -> list[tuple[str, float, float, int]]:
    """Session results read as a changelog: a session that fired again (a late click within the
    lateness, or a merge) replaces the results its window covers."""
    final: list[tuple[str, float, float, int]] = []
    for user, start, end, count in results:  # one user's results are in emission order (one subtask)
        final = [s for s in final if not (s[0] == user and start <= s[1] and s[2] <= end)]
        final.append((user, start, end, count))
    return sorted(final)


def test_sessions_on_event_time_counts_every_click_once_in_a_session_or_as_late(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt

    monkeypatch.chdir(tmp_path)
    summary = _run("sessions_event_time", capsys, monkeypatch)
    assert re.fullmatch(r"sessions: [\d,]+ session results committed to out-sessions/, \d+ late click\(s\) to "
                        r"late-clicks/, 0 restart\(s\)", summary), summary

    def seconds(iso: str) -> float:
        return dt.datetime.fromisoformat(iso).replace(tzinfo=dt.UTC).timestamp()

    clicks: list[tuple[str, float]] = []
    behind: set[tuple[str, float]] = set()  # clicks an hour or more behind their file's order
    for name in sorted(os.listdir("clicks")):
        newest = -math.inf
        with open(os.path.join("clicks", name)) as f:
            for line in f:
                click = json.loads(line)
                at = seconds(click["ts"])
                clicks.append((click["user"], at))
                if at < newest - 3_600:
                    behind.add((click["user"], at))
                newest = max(newest, at)
    late = [(user, seconds(ts)) for user, ts, _ in read_committed("late-clicks")]
    assert late and set(late) <= behind, "only the clicks uploaded hours late may be late"
    on_time = collections.Counter(clicks) - collections.Counter(late)
    assert sum(on_time.values()) == len(clicks) - len(late), "a late click that was never read"
    expected = _sessions(list(on_time.elements()), gap=30 * 60.0)
    assert _final_sessions(read_committed("out-sessions")) == expected  # every on-time click once


def _digit_updates() -> collections.Counter[tuple[Any, ...]]:
    return _running_counts([n * n % 10 for n in range(1, 200_001)])


def test_custom_source(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _run("custom_source", capsys, monkeypatch)
    assert "0 restart(s)" in summary
    assert _committed("out-custom-source") == _digit_updates()


def test_custom_source_crashing_once_commits_the_same_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CRASH_ONCE", "1")
    summary = _run("custom_source", capsys, monkeypatch)
    assert "1 restart(s)" in summary
    assert _committed("out-custom-source") == _digit_updates()


def test_connected_components_labels_every_vertex_with_its_components_smallest_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _run("connected_components", capsys, monkeypatch)
    assert summary.startswith("connected components:")
    sys.path.insert(0, EXAMPLES)
    try:
        cc: Any = importlib.import_module("connected_components")
    finally:
        sys.path.remove(EXAMPLES)
    # Union-find over the same graph: the smallest vertex id of each component.
    parent: dict[int, int] = {}

    def find(v: int) -> int:
        parent.setdefault(v, v)
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in cc.random_graph():
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    expected = {v: find(v) for v in parent}
    assert cc.final_labels(tuple(r) for r in read_committed(str(tmp_path / "out-components"))) == expected


def test_watched_sales_to_delta_upserts_each_closed_minute_s_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deltalake")
    from deltalake import DeltaTable

    monkeypatch.chdir(tmp_path)
    summary = _run("watched_sales_to_delta", capsys, monkeypatch)
    assert summary == "watched_sales_to_delta: 3 closed minutes of 3 stores in sales-per-minute/"
    # every sale of the files that arrived, summed per store and minute; the last minute is open
    totals: collections.Counter[tuple[str, float]] = collections.Counter()
    for name in os.listdir("landing-sales"):
        with open(os.path.join("landing-sales", name)) as f:
            for line in f:
                seconds, store, cents = line.split(",")
                totals[(store, float(seconds) // 60 * 60)] += int(cents)
    closed = {key: cents for key, cents in totals.items() if key[1] < 180}
    rows = DeltaTable("sales-per-minute").to_pyarrow_table().to_pylist()
    assert {(r["store"], r["minute"]): r["cents"] for r in rows} == closed
    assert len(rows) == len(closed) == 9


def test_live_migration_commits_every_update_once_without_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _run("live_migration", capsys, monkeypatch)
    assert "moved to subtask 1 by checkpoint" in summary and summary.endswith("0 restart(s)")
    assert _committed("out-live-migration") == _running_counts([f"user-{c % 500}" for c in range(40_000)])


def test_watched_sales_to_delta_without_deltalake_names_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setitem(sys.modules, "deltalake", None)  # as if it were not installed: import fails
    with pytest.raises(SystemExit) as ended:
        main(["run", os.path.join(EXAMPLES, "watched_sales_to_delta.py"), "--executor", "inprocess"])
    assert "pip install 'epochal[delta]'" in str(ended.value.code)


def test_the_delta_connectors_name_the_extra_they_need(monkeypatch: pytest.MonkeyPatch) -> None:
    from epochal.connectors import DeltaSource
    from epochal.errors import EpochalError

    monkeypatch.setitem(sys.modules, "deltalake", None)
    with pytest.raises(EpochalError, match=r"DeltaSource needs the deltalake library: pip install 'epochal\[delta\]'"):
        DeltaSource("some-table")


def test_nested_pagerank_matches_power_iteration_and_runs_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nested loops (an inner push loop per tolerance inside an outer loop over tolerances)
    reach the batch reference's ranks; a second run overwrites the first's output."""
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, EXAMPLES)
    try:
        pr: Any = importlib.import_module("nested_pagerank")
    finally:
        sys.path.remove(EXAMPLES)
    for _ in range(2):
        summary = _run("nested_pagerank", capsys, monkeypatch, times=1)
        assert summary.startswith("pagerank of 100 vertices")
        computed = pr.ranks(tuple(r) for r in read_committed(str(tmp_path / "out-pagerank")))
        assert pr.check(computed, pr.random_graph()) <= 5e-3  # and the total: nothing twice


def test_orders_cdc_to_postgres_keeps_totals_equal_to_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, postgres: Any
) -> None:
    """Runs twice (each run starts its own server unless given one: here the tests' server)."""
    import psycopg

    monkeypatch.chdir(tmp_path)
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS example_orders WITH (FORCE)")
        admin.execute("CREATE DATABASE example_orders")
    monkeypatch.setenv("EPOCHAL_EXAMPLE_DSN", postgres.dsn.replace("dbname=postgres", "dbname=example_orders"))
    assert _run("orders_cdc_to_postgres", capsys, monkeypatch) == "6 customers, totals match the orders table: True"
    monkeypatch.delenv("EPOCHAL_EXAMPLE_DSN")
    assert _run("orders_cdc_to_postgres", capsys, monkeypatch, times=1) == (
        "6 customers, totals match the orders table: True")


def test_async_lookup_prices_every_order_once_run_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("aiohttp")
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, EXAMPLES)
    try:
        example: Any = importlib.import_module("async_lookup")
    finally:
        sys.path.remove(EXAMPLES)
    expected = collections.Counter(
        (n, item, q, example.PRICES[item], q * example.PRICES[item]) for n, item, q in example.ORDERS)
    for _ in range(2):  # a second run starts over
        summary = _run("async_lookup", capsys, monkeypatch)
        assert re.fullmatch(r"async_lookup: 400 orders priced into out-priced/ \(4 s of lookups one at a time; "
                            r"took [\d.]+ s\), 0 restart\(s\)", summary), summary
        assert _committed("out-priced") == expected


def test_rich_functions_and_ttl_run_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    visits = [f"user-{(i * 7) % 60}" for i in range(300)]
    for _ in range(2):
        assert _run("rich_functions_and_ttl", capsys, monkeypatch) == \
            "rich_functions_and_ttl: 30 groups, 300 visits, 0 restart(s)"
        groups = [r for r in read_committed("out-batches")]
        assert sorted(x for _, group in groups for x in group) == sorted(visits)  # every record in one group
        assert all(len(group) == 10 and subtask in (0, 1) for subtask, group in groups)
        seen = collections.Counter(tuple(r) for r in read_committed("out-visits"))
        assert seen == collections.Counter([(u, "new") for u in set(visits)]
                                           + [(u, "returning") for u in visits[60:]])


def test_windows_by_count_and_clock_run_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    readings = [{"sensor": f"s{i % 3}", "t": i * 0.5, "value": (i * 37) % 100} for i in range(600)]
    for _ in range(2):
        assert _run("windows_by_count_and_clock", capsys, monkeypatch) == \
            "windows: 120 count windows, 5 minutes over all sensors, 0 restart(s)"
        by_sensor: dict[str, list[int]] = collections.defaultdict(list)
        for r in readings:
            by_sensor[r["sensor"]].append(r["value"])
        means = sorted((s, sum(vs[i:i + 5]) / 5) for s, vs in by_sensor.items() for i in range(0, len(vs), 5))
        assert sorted((s, m) for s, _, _, m in read_committed("out-count")) == means
        assert sum(n for *_, n in read_committed("out-clock")) == 600  # each reading in one clock window
        assert sorted(tuple(r) for r in read_committed("out-all")) == [
            (float(m), float(m + 60), max(r["value"] for r in readings if m <= r["t"] < m + 60))
            for m in range(0, 300, 60)]
        totals = {(s, m): sum(r["value"] for r in readings if r["sensor"] == s and m <= r["t"] < m + 60)
                  for s in ("s0", "s1", "s2") for m in range(0, 300, 60)}
        final: dict[tuple[str, float], int] = {}
        for s, start, _, total in read_committed("out-early"):  # one sensor's results in emission order
            final[(s, start)] = total
        assert final == {(s, float(m)): t for (s, m), t in totals.items()}


def test_clickstream_sessions_runs_twice_on_given_servers_and_once_on_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, nats_server: Any,
    pg_dsn: str,
) -> None:
    import datetime as dt

    import psycopg

    monkeypatch.chdir(tmp_path)
    summary = _run("clickstream_sessions", capsys, monkeypatch, times=1)  # no servers given: it starts its own
    assert re.fullmatch(r"clickstream_sessions: [\d,]+ sessions of 7,998 clicks committed to the PostgreSQL table "
                        r"click_sessions, 0 restart\(s\)", summary), summary

    sys.path.insert(0, EXAMPLES)
    try:
        example: Any = importlib.import_module("clickstream_sessions")
    finally:
        sys.path.remove(EXAMPLES)
    clicks = [json.loads(payload) for _, payload in example.clicks_of_a_day()]
    day = [(c["user"], dt.datetime.fromisoformat(c["ts"]).replace(tzinfo=dt.UTC).timestamp()) for c in clicks]
    expected = _sessions(day, gap=30 * 60.0)
    monkeypatch.setenv("NATS_URL", nats_server.url)
    monkeypatch.setenv("EPOCHAL_EXAMPLE_DSN", pg_dsn)
    for run in range(2):  # the second run makes the table anew and commits the same sessions
        summary = _run("clickstream_sessions", capsys, monkeypatch, times=1)
        assert summary.startswith(f"clickstream_sessions: {len(expected):,} sessions of 7,998 clicks"), (run, summary)
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT user_id, session_start, session_end, clicks FROM click_sessions").fetchall()
        assert sorted(rows) == expected


def test_shop_totals_commits_each_shop_s_aggregates_from_partials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    for run in range(2):  # twice in a row: each run starts over
        summary = _run("shop_totals", capsys, monkeypatch, times=1)
        assert summary.startswith("shop_totals: 50 shops"), summary
        sales = pa.concat_tables([pq.read_table(os.path.join("sales", f)) for f in sorted(os.listdir("sales"))])
        by_shop: dict[str, list[int]] = collections.defaultdict(list)
        for shop, amount in zip(sales.column("shop").to_pylist(), sales.column("amount").to_pylist()):
            by_shop[shop].append(amount)

        def last(name: str) -> dict[str, Any]:
            return {r[0]: r[1] for r in read_committed(os.path.join("out-shops", name))}

        assert last("total") == {s: sum(v) for s, v in by_shop.items()}, run
        assert last("largest") == {s: max(v) for s, v in by_shop.items()}
        assert last("spread") == {s: max(v) - min(v) for s, v in by_shop.items()}
        assert all(math.isclose(m, sum(by_shop[s]) / len(by_shop[s])) for s, m in last("mean").items())
        windows = list(read_committed(os.path.join("out-shops", "per-minute")))
        assert sum(r[-1] for r in windows) == sales.num_rows
        assert len(windows) == len({(r[0], r[1]) for r in windows})  # each (shop, minute) once


def test_vertical_elasticity_resizes_a_pool_live_and_runs_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example checks its totals itself; the pool grew (more than one process computed)."""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        summary = _run("vertical_elasticity", capsys, monkeypatch, times=1)
        processes = int(summary.split("; ")[1].split()[0])
        assert processes > 1 and summary.endswith("0 restart(s)"), summary


def test_every_example_is_run_by_a_test() -> None:
    """A new example gets a test that runs it twice (here, test_examples_*.py, or the Nexmark
    queries' own), or it is an example nobody knows still runs."""
    tests = "".join(p.read_text(encoding="utf-8") for p in Path(__file__).parent.glob("test_examples*.py"))
    missing = [n for n in sorted(os.listdir(EXAMPLES)) if n.endswith(".py") and n[:-3] not in tests]
    assert not missing, f"examples no test runs: {missing}"
