"""Smoke tests of the async I/O and state TTL benchmarks: tiny inputs, in-process, no Spark."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import async_io, state_ttl  # noqa: E402


def test_async_io_lookups_are_counted_once_both_ways() -> None:
    pytest.importorskip("aiohttp")
    server, url = async_io.start_server(latency=0.002)
    try:
        sync = async_io._run(url, 30, None)
        concurrent = async_io._run(url, 60, 10)
        ordered = async_io._run(url, 60, 10, ordered=True)
    finally:
        server.kill()
        server.wait()
    assert sync["records"] == 30 and concurrent["records"] == 60 and ordered["per_s"] > 0
    assert concurrent["per_s"] > 0 and sync["seconds"] > 0


def test_ttl_cost_and_soak_runs_complete() -> None:
    for config in (None, state_ttl.CONFIGS["TTL, incremental cleanup (5/record)"]):
        assert state_ttl._cost_run(2000, 100, config, "memory") > 0
    samples = state_ttl._soak_run(500.0, 4.0, state_ttl.StateTtlConfig(1), "memory", 1.0)
    assert samples and all(s["entries"] >= 0 for s in samples)
