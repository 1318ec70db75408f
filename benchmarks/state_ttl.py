"""State TTL: what it costs per record, and whether state stays flat over an unbounded key space.

**ttl_cost** — a keyed process function that reads and writes one value per record (300,000
records over 50,000 keys, one subtask, in-process; nothing emitted, so the state access is what
is measured), with the value state plain and with a TTL: cleaned incrementally (5 entries per
record, the default), only on access and at snapshot (`incremental_cleanup=0`), and renewed by
reads (`update_on="read_and_write"`); on the heap and on RocksDB. Configurations alternate,
three rounds, median kept; the cost is the difference per record against the plain state.

**ttl_soak** — a new key every record, never seen again (an unbounded key space), 2,000 records a
second for five minutes, checkpoints every 2 s; each key is remembered in a value state with a
TTL of 10 s. Every 10 s the sampler reads the latest complete checkpoint (the entries it holds)
and the process's resident memory. Beside it, the same job without TTL for two minutes: the
state a job without TTL keeps (what the issue calls growing forever).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

from epochal import CheckpointConfig, KeyedProcessFunction, StateTtlConfig, StreamEnvironment
from epochal.testing import CollectSink, ListSource

from .runner import benchmark, pyplot, save_figure
from .soak import PacedSequence

PAGE = os.sysconf("SC_PAGE_SIZE")


class Touch(KeyedProcessFunction):
    """Reads the key's last value and writes the new one; emits nothing."""

    def __init__(self, ttl: StateTtlConfig | None) -> None:
        self.ttl = ttl

    def open(self, ctx: Any) -> None:
        self.last = ctx.value_state("last", ttl=self.ttl)

    def process_element(self, value: Any, ctx: Any) -> None:
        self.last.value()
        self.last.update(value)


def _cost_run(records: int, keys: int, ttl: StateTtlConfig | None, backend: str) -> float:
    env = StreamEnvironment(parallelism=1, executor="inprocess", state_backend=backend, batch_size=1024)
    env.from_source(ListSource([i % keys for i in range(records)])).key_by(lambda k: k).process(
        Touch(ttl)).sink_to(CollectSink())
    started = time.perf_counter()
    env.execute("ttl-cost")
    return time.perf_counter() - started


CONFIGS: dict[str, StateTtlConfig | None] = {
    "no TTL": None,
    "TTL, incremental cleanup (5/record)": StateTtlConfig(3600),
    "TTL, cleanup on access and at snapshot only": StateTtlConfig(3600, incremental_cleanup=0),
    "TTL, renewed on read (read_and_write)": StateTtlConfig(3600, update_on="read_and_write"),
}


@benchmark("ttl_cost", "State TTL: cost per record")
def ttl_cost(quick: bool) -> dict[str, Any]:
    keys = 50_000
    rows: list[dict[str, Any]] = []
    for backend, records in (("memory", 100_000 if quick else 300_000), ("disk", 30_000 if quick else 100_000)):
        names = list(CONFIGS) if backend == "memory" else list(CONFIGS)[:2]
        times: dict[str, list[float]] = {n: [] for n in names}
        _cost_run(10_000, 1000, None, backend)  # warm up
        for round_ in range(1 if quick else 3):
            order = names if round_ % 2 == 0 else names[::-1]
            for name in order:
                times[name].append(_cost_run(records, keys, CONFIGS[name], backend))
        base = statistics.median(times["no TTL"])
        for name in names:
            seconds = statistics.median(times[name])
            rows.append({"backend": backend, "config": name, "records": records, "seconds": seconds,
                         "us_per_record": seconds / records * 1e6,
                         "cost_us_per_record": (seconds - base) / records * 1e6, "runs": times[name]})
    result: dict[str, Any] = {"rows": rows, "keys": keys, "load": os.getloadavg()[0]}
    result["summary"] = _cost_summary(result)
    return result


def _cost_summary(result: dict[str, Any]) -> str:
    lines = [
        f"One value read and written per record, {result['keys']:,} keys, one subtask in-process, nothing emitted; "
        "median of alternating rounds (load average "
        f"{result['load']:.1f} at the end).",
        "",
        "| backend | value state | records | µs per record | TTL's cost per record |",
        "|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        cost = "—" if r["config"] == "no TTL" else f"{r['cost_us_per_record']:+.2f} µs"
        lines.append(f"| {r['backend']} | {r['config']} | {r['records']:,} | {r['us_per_record']:.2f} | {cost} |")
    lines += [
        "",
        "A TTL value is a `(value, expires_at)` tuple and every access reads the task's clock; the incremental "
        "cleanup visits five entries per record after each batch. Renewing on read writes the value back on "
        "every read.",
    ]
    return "\n".join(lines)


# -- the soak ----------------------------------------------------------------------------------------
class Seen(KeyedProcessFunction):
    """Remembers each key (value state, with or without a TTL); emits nothing."""

    def __init__(self, ttl: StateTtlConfig | None) -> None:
        self.ttl = ttl

    def open(self, ctx: Any) -> None:
        self.seen = ctx.value_state("seen", default=False, ttl=self.ttl)

    def process_element(self, value: Any, ctx: Any) -> None:
        if not self.seen.value():
            self.seen.update(True)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def _entries(ckpt: str) -> int | None:
    from epochal.state.reader import read_state

    try:
        return len(read_state(ckpt, "seen"))
    except Exception:  # no complete checkpoint yet, or one retention just removed
        return None


def _soak_run(rate: float, seconds: float, ttl: StateTtlConfig | None, backend: str, sample: float
              ) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="epochal-ttl-soak-") as directory:
        ckpt = os.path.join(directory, "ckpt")
        env = StreamEnvironment(parallelism=1, executor="inprocess", state_backend=backend,
                                checkpoint=CheckpointConfig(interval=2.0, directory=ckpt, retain=2))
        per_split = int(rate * seconds / 2)
        env.from_source(PacedSequence(per_split, rate, time.time())).key_by(lambda k: k).process(
            Seen(ttl)).uid("seen").sink_to(CollectSink())
        handle = env.execute_async("ttl-soak")
        samples: list[dict[str, float]] = []
        started = time.monotonic()
        while not handle.done():
            time.sleep(sample)
            entries = _entries(ckpt)
            if entries is not None:
                samples.append({"t": time.monotonic() - started, "entries": entries, "rss_mb": _rss_mb(),
                                "records": min(rate * (time.monotonic() - started), 2 * per_split)})
        handle.result()
        return samples


@benchmark("ttl_soak", "State TTL: flat state over an unbounded key space (soak)")
def ttl_soak(quick: bool) -> dict[str, Any]:
    rate = 2000.0
    minutes = 1.0 if quick else 5.0
    ttl = StateTtlConfig(10)
    runs = {
        "TTL 10 s, memory": _soak_run(rate, minutes * 60, ttl, "memory", 10.0),
        "TTL 10 s, RocksDB": _soak_run(rate, minutes * 60 if not quick else 40, ttl, "disk", 10.0),
        "no TTL, memory": _soak_run(rate, 40 if quick else 120, None, "memory", 10.0),
    }
    result: dict[str, Any] = {"rate": rate, "ttl_s": 10.0, "minutes": minutes, "runs": runs,
                              "load": os.getloadavg()[0]}
    result["summary"] = _soak_summary(result)
    _soak_plot(result)
    return result


def _soak_summary(result: dict[str, Any]) -> str:
    lines = [
        f"A new key every record at {result['rate']:.0f} records/s, never repeated; each remembered in a value "
        f"state (TTL {result['ttl_s']:.0f} s: about {result['rate'] * result['ttl_s']:,.0f} keys live at any "
        "time); checkpoints every 2 s; every 10 s the latest complete checkpoint's entries are counted.",
        "",
        "| run | minutes | records | entries in the last checkpoint: min / max from 30 s to the source's end "
        "| after it (the backlog) | last |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, samples in result["runs"].items():
        if not samples:
            continue
        total = max(s["records"] for s in samples)
        steady = [s["entries"] for s in samples if s["t"] >= 30 and s["records"] < total] or [
            s["entries"] for s in samples]
        tail = [s["entries"] for s in samples if s["records"] >= total]
        last = samples[-1]
        lines.append(f"| {name} | {last['t'] / 60:.1f} | {last['records']:,.0f} | {min(steady):,} / {max(steady):,} "
                     f"| {max(tail):,} | {last['entries']:,} |" if tail else
                     f"| {name} | {last['t'] / 60:.1f} | {last['records']:,.0f} | {min(steady):,} / {max(steady):,} "
                     f"| - | {last['entries']:,} |")
    lines += [
        "",
        "With the TTL the state holds the last ten seconds of keys, whatever the run's length: expired entries "
        "leave by the incremental cleanup (five visited per record), and checkpoints leave out what expired "
        "since. Without it the state is every key ever seen. On a loaded machine the job falls behind the "
        "paced source; when the source has emitted everything, the job works off its backlog, many keys within "
        "ten seconds, and the state holds them all until they expire (the column after the source's end).",
        "",
        "![entries in the checkpoint over time](img/ttl_soak.png)",
    ]
    return "\n".join(lines)


def _soak_plot(result: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, samples in result["runs"].items():
        ax.plot([s["t"] for s in samples], [s["entries"] for s in samples], "o-", markersize=3, label=name)
    ax.set_xlabel("seconds")
    ax.set_ylabel("keyed entries in the latest checkpoint")
    ax.set_title("An unbounded key space, TTL 10 s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, "ttl_soak.png")

