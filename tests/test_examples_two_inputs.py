"""The examples of two-input operators and side outputs (`examples/connected_streams.py`,
`ad_clicks.py`, `broadcast_rules.py`, `side_outputs.py`) run with `epochal run --executor
inprocess`, twice in a row in one directory, and commit what their inputs make of them by the
examples' own rules, computed here from the input files."""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from test_examples import _committed, _run


def _lines(directory: str) -> list[dict[str, Any]]:
    rows = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            rows.extend(json.loads(line) for line in f)
    return rows


def _time(iso: str) -> dt.datetime:
    return dt.datetime.fromisoformat(iso)


def _twice(name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    first = _run(name, capsys, monkeypatch, times=1)
    second = _run(name, capsys, monkeypatch, times=1)  # an example runs twice in a row
    assert first == second or name == "ad_clicks", (first, second)
    return second


def test_connected_streams_matches_each_order_with_its_payment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _twice("connected_streams", capsys, monkeypatch)
    assert summary.startswith("connected streams: ") and summary.endswith("0 restart(s)")
    window = dt.timedelta(minutes=15)
    orders = {o["order"]: o for o in _lines("orders")}
    payments = {p["order"]: p for p in _lines("payments")}  # at most one per order
    paid, unpaid, orphans = [], [], []
    for n, order in orders.items():
        payment = payments.get(n)
        if payment is not None and abs(_time(payment["ts"]) - _time(order["ts"])) < window:
            paid.append((n, order["customer"], order["amount"], payment["ts"]))
        else:
            unpaid.append((n, order["customer"], order["amount"], order["ts"]))
    orphans = [(n, p["ts"]) for n, p in payments.items() if not any(q[0] == n for q in paid)]
    assert paid and unpaid and orphans
    assert _committed("out-paid") == collections.Counter(paid)
    assert _committed("out-unpaid") == collections.Counter(unpaid)
    assert _committed("out-orphans") == collections.Counter(orphans)


def test_ad_clicks_attributes_each_click_once_and_prices_it_at_its_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _twice("ad_clicks", capsys, monkeypatch)
    match = re.fullmatch(r"ad clicks: ([\d,]+) impressions attributed to out-attributed/ \((\d+) late click\(s\) to "
                         r"out-late-clicks/\), ([\d,]+) clicks priced to out-charged/ \((\d+) too late to price\), "
                         r"0 restart\(s\)", summary)
    assert match, summary
    impressions, clicks, prices = _lines("impressions"), _lines("clicks"), _lines("prices")
    late = {tuple(r) for r in _committed("out-late-clicks")} if os.path.exists("out-late-clicks") else set()
    assert len(late) == int(match.group(2))
    late_impressions = {r[0] for r in late}
    click_of = {c["impression"]: c for c in clicks}
    expected = []
    for imp in impressions:
        click = click_of.get(imp["impression"])
        met = (click is not None and imp["impression"] not in late_impressions
               and dt.timedelta(0) <= _time(click["ts"]) - _time(imp["ts"]) <= dt.timedelta(minutes=10))
        expected.append((imp["impression"], imp["campaign"], click["ts"] if met else None))
    assert _committed("out-attributed") == collections.Counter(expected)  # each impression once
    charged = _committed("out-charged")
    assert sum(charged.values()) == len(clicks) - int(match.group(4))
    for (impression, campaign, ts, cpc), n in charged.items():
        valid = [(_time(p["ts"]), i, p["cpc"]) for i, p in enumerate(prices)
                 if p["campaign"] == campaign and _time(p["ts"]) <= _time(ts)]
        assert n == 1 and cpc == max(valid)[2], (impression, ts)  # the price valid at the click


def test_broadcast_rules_alerts_on_the_limit_valid_at_each_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _twice("broadcast_rules", capsys, monkeypatch)
    assert summary.startswith("broadcast rules: 4,0") and summary.endswith("0 restart(s)")
    rules = sorted((_time(r["ts"]), r["kind"], r["limit"]) for r in _lines("rules"))
    alerts, unknown = [], []
    for reading in _lines("readings"):
        at = _time(reading["ts"])
        valid = [limit for since, kind, limit in rules if kind == reading["kind"] and since <= at]
        row = (reading["sensor"], reading["kind"], reading["value"])
        if not valid:
            unknown.append((*row, reading["ts"]))
        elif reading["value"] > valid[-1]:
            alerts.append((*row, valid[-1], reading["ts"]))
    assert alerts and unknown
    assert _committed("out-alerts") == collections.Counter(alerts)
    assert _committed("out-unknown") == collections.Counter(unknown)


def test_side_outputs_split_errors_and_busy_minutes_from_the_medians(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = _twice("side_outputs", capsys, monkeypatch)
    assert summary == ("side outputs: 5,000 log lines, 5,000 out of triage (requests and errors) to out-minutes/, "
                       "out-errors/ and out-busy/, 0 restart(s)")
    logs = _lines("logs")
    errors = [(r["service"], r["level"], r["latency_ms"], r["ts"]) for r in logs if r["level"] == "ERROR"]
    minutes: dict[tuple[str, float], list[int]] = collections.defaultdict(list)
    for r in logs:
        if r["level"] != "ERROR":
            start = _time(r["ts"]).replace(tzinfo=dt.UTC).timestamp() // 60 * 60
            minutes[(r["service"], start)].append(r["latency_ms"])
    assert _committed("out-errors") == collections.Counter(errors)
    assert _committed("out-minutes") == collections.Counter(
        (s, m, statistics.median(v)) for (s, m), v in minutes.items())
    assert _committed("out-busy") == collections.Counter((s, m, len(v)) for (s, m), v in minutes.items() if len(v) > 30)
