"""Jobs with two inputs, end to end in process: connected streams, broadcast state and the joins
commit exactly the brute-force result (`jobs.expected`) at parallelism 1 to 4, whatever the
batches, the splits and the interleaving the seeded scheduler picks; across a crash of either
source and a failure of the user's function (restored from a checkpoint); and restored from a
checkpoint at another parallelism.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from two_input_jobs import (
    JITTER,
    JOBS,
    RULES,
    WINDOW,
    PairWhenBothSeen,
    RulesAtTime,
    SlowRecords,
    WindowIds,
    committed,
    env_of,
    expected,
    ids,
    records,
    sources,
    with_crash,
)

from epochal import (
    CheckpointConfig,
    JobState,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.result import JobResult
from epochal.state.keygroups import RoutingTable
from epochal.testing import CollectSink, ListSource
from epochal.windows import Tumbling


def _run(env: StreamEnvironment, seed: int, name: str = "two-inputs") -> JobResult:
    return InProcessExecutor(seed=seed, virtual_time=True, step_time=0.001).execute(env.job_graph(name))


def _job(job: str, tmp: Path, left: list[Any], right: list[Any], *, parallelism: int = 2, splits: int = 2,
         batch_size: int = 3, how: str = "inner", interval: float = 0.004,
         mode: str = "aligned") -> tuple[StreamEnvironment, CollectSink]:
    env = env_of(parallelism, str(tmp), interval=interval, mode=mode)
    sink = CollectSink()
    a, b = sources(env, left, right, splits=splits, batch_size=batch_size)
    JOBS[job](a, b, how=how).sink_to(sink)
    return env, sink


HOWS = {"interval": ["inner", "left"], "window": ["inner", "left", "semi"], "temporal": ["inner", "left"],
        "co_process": ["inner"], "broadcast": ["inner"]}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), parallelism=st.integers(1, 4), splits=st.integers(1, 3),
       batch_size=st.integers(1, 7), data=st.data())
@pytest.mark.parametrize("job", sorted(JOBS))
def test_jobs_commit_the_reference_at_any_parallelism(tmp_path: Path, job: str, seed: int, parallelism: int,
                                                      splits: int, batch_size: int, data: Any) -> None:
    rng = random.Random(seed)
    left, right = records(rng, rng.randrange(0, 40), "l"), records(rng, rng.randrange(0, 25), "r")
    how = data.draw(st.sampled_from(HOWS[job]))
    if job == "window" and how == "semi":
        expect = _semi_windows(left, right)
    else:
        expect = expected(job, left, right, how)
    env, sink = _job(job, Path(tempfile.mkdtemp(dir=tmp_path)), left, right, parallelism=parallelism, splits=splits,
                     batch_size=batch_size, how=how)
    _run(env, seed)
    got = committed(sink.committed())
    if job == "window" and how == "semi":
        got = committed((s, a) for s, a, _ in got)
    assert got == expect


def _semi_windows(left: list[Any], right: list[Any]) -> Any:
    out = expected("window", left, right, "inner")
    return committed({(s, a) for s, a, _ in out})


@pytest.mark.parametrize("job", sorted(JOBS))
@pytest.mark.parametrize(("crash", "mode"), [("left", "aligned"), ("right", "aligned"), ("left", "unaligned")])
def test_a_crash_of_either_input_commits_the_output_of_a_run_without_it(tmp_path: Path, job: str, crash: str,
                                                                        mode: str) -> None:
    """Unaligned checkpoints too: the records in flight on each input's channels are logged and
    replayed to the input they came on."""
    rng = random.Random(7)
    left, right = records(rng, 120, "l"), records(rng, 60, "r")
    how = "left" if job in ("interval", "temporal") else "inner"
    crashed_left = with_crash(left, 90) if crash == "left" else left
    crashed_right = with_crash(right, 45) if crash == "right" else right
    env, sink = _job(job, tmp_path / "crash", crashed_left, crashed_right, how=how, mode=mode)
    result = _run(env, seed=3)
    assert result.restarts == 1 and result.restored_from[1] is not None, "restored from a checkpoint"
    assert committed(sink.committed()) == expected(job, left, right, how)


_FAILED: set[str] = set()


def _fail_once(record_id: str) -> None:
    """The user's function fails the first time it meets `record_id`: a bug that went away."""
    if record_id not in _FAILED:
        _FAILED.add(record_id)
        raise RuntimeError("the user's function failed")


def _ids_failing(left: Any, right: Any) -> tuple[str, str | None]:
    if left["id"] == "l50":
        _fail_once("l50")
    return (left["id"], None if right is None else right["id"])


class _WindowIdsFailing(WindowIds):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        if left["id"] == "l50":
            _fail_once("l50")
        return super().process_element(left, right, ctx)


class _PairFailing(PairWhenBothSeen):
    def process_element2(self, value: Any, ctx: Any) -> Any:
        if value["id"] == "r30":
            _fail_once("r30")
        return super().process_element2(value, ctx)


class _RulesFailing(RulesAtTime):
    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        if value["id"] == "r30":
            _fail_once("r30")
        super().process_broadcast_element(value, ctx)


FAILING = {
    "interval": lambda a, b: a.key_by("k").interval_join(b.key_by("k")).between(-1.0, 2.0).apply(
        _ids_failing, how="left"),
    "window": lambda a, b: a.join(b).where("k").equal_to("k").window(WINDOW).process(_WindowIdsFailing()),
    "temporal": lambda a, b: a.key_by("k").temporal_join(b.key_by("k")).apply(_ids_failing, how="left"),
    "co_process": lambda a, b: a.key_by("k").connect(b.key_by("k")).process(_PairFailing()),
    "broadcast": lambda a, b: a.key_by("k").connect(b.broadcast(RULES)).process(_RulesFailing()),
}


@pytest.mark.parametrize("job", sorted(FAILING))
def test_a_failure_of_the_user_function_restores_and_commits_every_result_once(tmp_path: Path, job: str) -> None:
    """The function fails once mid-stream (a join's pair function, a co-process or broadcast
    function on the second input): the job restores its last checkpoint, both sides' state and
    the broadcast state with it, and commits what a run without the failure commits."""
    _FAILED.clear()
    rng = random.Random(11)
    left, right = records(rng, 120, "l"), records(rng, 80, "r")
    env = env_of(2, str(tmp_path / "c"))
    sink = CollectSink()
    a, b = sources(env, left, right)
    FAILING[job](a, b).sink_to(sink)
    result = _run(env, seed=1)
    assert len(_FAILED) == 1 and result.restarts == 1
    assert "the user's function failed" in result.failures[0]
    assert result.restored_from[1] is not None, "restored from a checkpoint"
    how = "left" if job in ("interval", "temporal") else "inner"
    assert committed(sink.committed()) == expected(job, left, right, how)


def _wait(handle: Any, parallelism: int) -> None:
    deadline = time.monotonic() + 60
    while not (handle.status().state is JobState.RUNNING and handle.status().parallelism == parallelism):
        assert time.monotonic() < deadline, handle.status()
        time.sleep(0.005)


@pytest.mark.parametrize("job", sorted(JOBS))
def test_a_rescale_by_restore_and_live_moves_commit_every_result_once(tmp_path: Path, job: str) -> None:
    """Rescaled while running: 2 -> 3 restarts from a checkpoint at 3 (join state split anew by
    key group; broadcast state, written once, read by every new subtask), 3 -> 5 and 5 -> 2 move
    key groups live, both sides' state with them; then every key group moves back and forth."""
    rng = random.Random(13)
    left, right = records(rng, 600, "l", keys=12, span=60.0), records(rng, 200, "r", keys=12, span=60.0)
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "c")))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(JITTER, timestamp="t")
    a = env.from_source(SlowRecords(left, splits=2), name="left", watermarks=watermarks)
    b = env.from_source(SlowRecords(right, splits=2), name="right", watermarks=watermarks)
    sink = CollectSink()
    how = "left" if job in ("interval", "temporal") else "inner"
    JOBS[job](a, b, how=how).sink_to(sink)
    handle = env.execute_async(f"rescaled-{job}")
    _wait(handle, 2)
    handle.rescale(3, timeout=60)
    _wait(handle, 3)
    handle.rescale(5, timeout=60)
    _wait(handle, 5)
    handle.rescale(2, timeout=60)
    _wait(handle, 2)
    table = RoutingTable.contiguous(2, 128)
    handle.move_key_groups({g: 1 - table.owners[g] for g in range(0, 128, 3)}, timeout=60)
    result = handle.result(timeout=120)
    assert result.restarts == 0
    assert committed(sink.committed()) == expected(job, left, right, how)


ODD = OutputTag("odd")


class _Split(KeyedProcessFunction):
    """Even ids out, odd ids to a side output; a running count per key in keyed state."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.value_state("count", default=0)

    def process_element(self, value: Any, ctx: Any) -> Any:
        n = self.count.value() + 1
        self.count.update(n)
        if int(value["id"][1:]) % 2:
            ctx.output(ODD, (value["id"], n))
            return None
        return [(value["id"], n)]


def test_side_outputs_are_committed_exactly_once_across_a_crash(tmp_path: Path) -> None:
    rng = random.Random(23)
    items = records(rng, 300, "x")
    outputs = []
    for crash in (None, 200):
        env = env_of(2, str(tmp_path / f"c{crash}"))
        source = ListSource(items if crash is None else with_crash(items, crash), splits=1, batch_size=3)
        split = env.from_source(source).key_by("k").process(_Split()).uid("split")
        main, odd = CollectSink(), CollectSink()
        split.sink_to(main)
        split.side_output(ODD).sink_to(odd)
        result = _run(env, seed=4)
        assert result.restarts == (0 if crash is None else 1)
        outputs.append((committed(main.committed()), committed(odd.committed())))
    assert outputs[0] == outputs[1]
    assert sum(outputs[0][0].values()) + sum(outputs[0][1].values()) == 300


def _disordered(rng: random.Random, n: int, prefix: str) -> list[dict[str, Any]]:
    """Records far more out of order than the watermarks allow: some are late at the join."""
    out = records(rng, n, prefix, span=30.0)
    for r in out:
        if rng.random() < 0.2:
            r["t"] = max(0.0, r["t"] - rng.uniform(1.0, 6.0))
    return out


def _late_job(tmp: Path, seed: int, parallelism: int, job: str) -> tuple[Any, ...]:
    """A join with late records on both sides: its results, both late side outputs, both inputs."""
    rng = random.Random(seed)
    left, right = _disordered(rng, rng.randrange(10, 60), "l"), _disordered(rng, rng.randrange(5, 30), "r")
    env = env_of(parallelism, tempfile.mkdtemp(dir=tmp))
    a, b = sources(env, left, right, splits=rng.randrange(1, 3), batch_size=rng.randrange(1, 6))
    if job == "interval":
        joined = a.key_by("k").interval_join(b.key_by("k")).between(-1.0, 2.0).apply(ids, how="left")
    elif job == "temporal":
        joined = a.key_by("k").temporal_join(b.key_by("k")).apply(ids, how="left")
    else:
        joined = a.join(b).where("k").equal_to("k").window(Tumbling(3.0)).apply(ids)
    sink, late_left, late_right = CollectSink(), CollectSink(), CollectSink()
    joined.sink_to(sink)
    joined.late_records("left").sink_to(late_left)
    joined.late_records("right").sink_to(late_right)
    _run(env, seed)
    return sink.committed(), late_left.committed(), late_right.committed(), left, right


LATE_JOBS = ["interval", "temporal", "tumbling"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), parallelism=st.integers(1, 4), job=st.sampled_from(LATE_JOBS))
def test_late_records_go_to_the_side_output_and_the_rest_join_exactly(tmp_path: Path, seed: int, parallelism: int,
                                                                      job: str) -> None:
    """With records later than the watermarks allow, which ones are late depends on the run;
    whatever they are, the results are the join of the others, and the late ones are each in
    the late side output once (a late record dropped, or joined, fails it)."""
    results, late_left, late_right, left, right = _late_job(tmp_path, seed, parallelism, job)
    gone_left, gone_right = {r["id"] for r in late_left}, {r["id"] for r in late_right}
    assert len(gone_left) == len(late_left) and len(gone_right) == len(late_right)
    on_left = [r for r in left if r["id"] not in gone_left]
    on_right = [r for r in right if r["id"] not in gone_right]
    if job == "tumbling":
        window = Tumbling(3.0)
        expect = committed((a["id"], b["id"]) for a in on_left for b in on_right
                           if a["k"] == b["k"] and window.last_start_index(a["t"]) == window.last_start_index(b["t"]))
    else:
        expect = expected(job, on_left, on_right, "left")
    assert committed(results) == expect


@pytest.mark.parametrize("job", LATE_JOBS)
def test_the_disordered_inputs_do_make_late_records(tmp_path: Path, job: str) -> None:
    """The property above is not vacuous: its inputs do leave records late (seed 3 on each join)."""
    _, late_left, late_right, _, _ = _late_job(tmp_path, 3, 2, job)
    assert late_left or late_right


class _RightWaitsForLeft(KeyedCoProcessFunction):
    """A right record waits for the operator's watermark to pass its time, then emits the left
    records of its key before it. Right if the watermark is the minimum of both inputs (no left
    record before it can come any more); a left record missing if it followed the right alone."""

    def open(self, ctx: Any) -> None:
        self.lefts = ctx.list_state("lefts")
        self.waiting = ctx.map_state("waiting")

    def process_element1(self, value: Any, ctx: Any) -> None:
        self.lefts.add((value["t"], value["id"]))

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.waiting.put(value["t"], [*(self.waiting.get(value["t"]) or []), value["id"]])
        ctx.timers.register_event_time(value["t"])

    def on_timer(self, timestamp: float, ctx: Any) -> Iterable[Any]:
        assert ctx.current_watermark() >= timestamp
        before = tuple(sorted(i for t, i in self.lefts.get() if t < timestamp))
        for right in self.waiting.get(timestamp) or []:
            yield (right, before)
        self.waiting.remove(timestamp)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_two_input_operator_fires_timers_on_the_minimum_of_both_watermarks(tmp_path: Path, seed: int) -> None:
    """The left input lags far behind the right (one record a batch, three times as many): a
    timer set by a right record fires only once the left's watermark passed it too."""
    rng = random.Random(seed)
    left, right = records(rng, 150, "l", span=40.0), records(rng, 50, "r", span=40.0)
    env = env_of(2, str(tmp_path / "c"))
    watermarks = WatermarkStrategy.bounded_out_of_orderness(JITTER, timestamp="t")
    a = env.from_source(ListSource(left, splits=1, batch_size=1), name="left", watermarks=watermarks)
    b = env.from_source(ListSource(right, splits=1, batch_size=10), name="right", watermarks=watermarks)
    sink = CollectSink()
    a.key_by("k").connect(b.key_by("k")).process(_RightWaitsForLeft()).sink_to(sink)
    _run(env, seed)
    expect = committed((r["id"], tuple(sorted(a["id"] for a in left if a["k"] == r["k"] and a["t"] < r["t"])))
                       for r in right)
    assert committed(sink.committed()) == expect
