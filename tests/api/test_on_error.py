"""Bad records: `on_error="fail" | "skip" | "dead_letter"` on every operator that runs user code.

Each policy on each kind of operator, in-process: `fail` fails the job naming the operator, the
record and (in the source's task) where it was read; `skip` drops and counts it
(`skipped_records`); `dead_letter` sends `{"operator", "record", "error", "position"}` to the
environment's dead-letter sink and the rest of the output is what it would be without the bad
records. Then: dead letters exactly once across a crash, and a poison pill that ends the job.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal import (
    CheckpointConfig,
    GraphError,
    JobFailedError,
    KeyedProcessFunction,
    RestartStrategy,
    StreamEnvironment,
    WatermarkStrategy,
)
from epochal.api.connector import Source, SplitReader
from epochal.api.functions import AggregateFunction, ProcessWindowFunction
from epochal.cluster.inprocess import InProcessExecutor
from epochal.errors import OperatorError, RecordError
from epochal.runtime.operators.bad_records import json_value
from epochal.testing import CollectSink, Crash, ListSource
from epochal.windows import Tumbling

GOOD = [1, 2, 4, 5]
ITEMS = [1, 2, "bad", 4, 5]  # "bad" fails every function below: 10 // "bad", "bad" + 1, ...
POLICIES = ["skip", "dead_letter"]


def _env(**options: Any) -> StreamEnvironment:
    options.setdefault("parallelism", 1)
    options.setdefault("executor", "inprocess")
    options.setdefault("restart", RestartStrategy.none())
    return StreamEnvironment(**options)


def _run(env: StreamEnvironment, name: str = "bad-records") -> Any:
    return InProcessExecutor(virtual_time=True).execute(env.job_graph(name))


def _letters(dlq: CollectSink) -> list[tuple[str, Any, str]]:
    return sorted((d["operator"], d["record"], d["error"].split(":")[0]) for d in dlq.committed())


class _Case:
    """One kind of operator: how to build it with a policy, and its output on the good records."""

    def __init__(self, name: str, build: Any, expected: list[Any], fails_in: str | None = None) -> None:
        self.name, self.build, self.expected = name, build, expected
        self.fails_in = fails_in or name  # the operator a failure under "fail" names


def _key(r: Any) -> Any:
    return r % 2


class _Sum(AggregateFunction):  # type: ignore[type-arg]
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, acc: int) -> int:
        return acc + value

    def get_result(self, acc: int) -> int:
        return acc


class _Emit(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value + 100


CASES = [
    _Case("map", lambda s, p: s.map(lambda r: r + 1, on_error=p), [2, 3, 5, 6]),
    _Case("filter", lambda s, p: s.filter(lambda r: r > 1, on_error=p), [2, 4, 5]),
    _Case("flat_map", lambda s, p: s.flat_map(lambda r: [r] * (10 // r), on_error=p),
          [1] * 10 + [2] * 5 + [4, 4, 5, 5]),
    # without a policy the key selector fails where the records are partitioned for "reduce"
    _Case("key_by", lambda s, p: s.key_by(_key, on_error=p).reduce(lambda a, b: a + b), [1, 2, 6, 6], "reduce"),
    _Case("reduce", lambda s, p: s.key_by(lambda r: 0).reduce(lambda a, b: a + b, on_error=p), [1, 3, 7, 12]),
    _Case("aggregate", lambda s, p: s.key_by(lambda r: 0).aggregate(_Sum(), on_error=p),
          [(0, 1), (0, 3), (0, 7), (0, 12)]),
    _Case("process", lambda s, p: s.key_by(lambda r: 0).process(_Emit(), on_error=p), [101, 102, 104, 105]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fail_names_the_operator_and_the_record(case: _Case) -> None:
    env = _env()
    case.build(env.from_source(ListSource(ITEMS)), "fail").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        _run(env)
    cause = info.value.cause
    assert isinstance(cause, RecordError)
    assert cause.record == "bad" and cause.operator == case.fails_in
    assert f"operator {case.fails_in!r} failed on record 'bad'" in str(info.value)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_skip_drops_and_counts_the_record(case: _Case) -> None:
    env = _env()
    out = CollectSink()
    stream = case.build(env.from_source(ListSource(ITEMS)), "skip")
    stream.sink_to(out)
    result = _run(env)
    assert sorted(out.committed(), key=repr) == sorted(case.expected, key=repr)
    skipped = {m.name: m.skipped_records for m in result.operators if m.skipped_records}
    assert skipped == {case.name: 1}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dead_letter_sends_the_record_to_the_dead_letter_sink(case: _Case) -> None:
    dlq = CollectSink()
    env = _env(dead_letter=dlq)
    out = CollectSink()
    case.build(env.from_source(ListSource(ITEMS)), "dead_letter").sink_to(out)
    _run(env)
    assert sorted(out.committed(), key=repr) == sorted(case.expected, key=repr)
    (letter,) = dlq.committed()
    assert set(letter) == {"operator", "record", "error", "position"}
    assert letter["operator"] == case.name and letter["record"] == "bad"
    assert letter["error"].startswith("TypeError: ")


def test_a_failing_timer_is_a_dead_letter_too() -> None:
    class Timer(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            ctx.timers.register_event_time(value)
            return None

        def on_timer(self, timestamp: float, ctx: Any) -> Any:
            if timestamp == 3.0:
                raise ValueError("no timer at 3")
            yield (ctx.key, timestamp)

    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp=lambda r: r)
    (env.from_source(ListSource([1.0, 2.0, 3.0, 4.0]), watermarks=strategy)
        .key_by(lambda r: "k").process(Timer(), on_error="dead_letter").sink_to(out))
    _run(env)
    assert sorted(out.committed()) == [("k", 1.0), ("k", 2.0), ("k", 4.0)]
    (letter,) = dlq.committed()
    assert letter["record"] == "<event_time timer 3.0 of key 'k'>" and letter["error"] == "ValueError: no timer at 3"


# -- columnar: map_batches ------------------------------------------------------------------------
class _ArrowSource(Source):
    """One split of Arrow batches of `{"v": ...}`."""

    def __init__(self, batches: list[list[Any]]) -> None:
        self.batches = batches

    def splits(self) -> list[Any]:
        return [_Split()]

    def open_split(self, split: Any, position: Any) -> SplitReader:
        return _ArrowReader(self.batches, position or 0)


class _Split:
    split_id = "arrow-0"


class _ArrowReader(SplitReader):
    def __init__(self, batches: list[list[Any]], index: int) -> None:
        self.batches, self.index = batches, index

    def read(self, max_records: int) -> Any:
        if self.index >= len(self.batches):
            return None
        self.index += 1
        return pa.RecordBatch.from_pydict({"v": pa.array(self.batches[self.index - 1], pa.string())})

    def position(self) -> int:
        return self.index


def _to_int(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Fails on the whole batch if one value is not a number."""
    return pa.RecordBatch.from_arrays([pc.cast(batch.column("v"), pa.int64())], names=["n"])


@pytest.mark.parametrize("policy", POLICIES)
def test_map_batches_finds_the_bad_rows_of_a_failing_batch(policy: str) -> None:
    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    batches = [["1", "2", "3"], ["4", "x", "6", "7", "y", "9"], ["10"]]
    env.from_source(_ArrowSource(batches)).map_batches(_to_int, on_error=policy).sink_to(out)
    result = _run(env)
    assert sorted(out.committed()) == [1, 2, 3, 4, 6, 7, 9, 10]
    if policy == "skip":
        assert result.operator("map_batches").skipped_records == 2
        assert dlq.committed() == []
    else:
        assert sorted(d["record"]["v"] for d in dlq.committed()) == ["x", "y"]
        assert all(d["error"].startswith("ArrowInvalid") for d in dlq.committed())


def test_map_batches_fail_names_the_batch() -> None:
    env = _env()
    env.from_source(_ArrowSource([["1", "x"]])).map_batches(_to_int).sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        _run(env)
    assert """operator 'map_batches' failed on record "<batch of 2 records: [{'v': '1'}, {'v': 'x'}]...>" """ \
        """(split 'arrow-0', in the batch read from its start to position 1): ArrowInvalid""" in str(info.value)


def test_a_key_by_column_passes_arrow_batches_whole() -> None:
    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    env.from_source(_ArrowSource([["a", "b", "a"]])).key_by("v", on_error="dead_letter").count().sink_to(out)
    _run(env)
    assert sorted(out.committed()) == [("a", 1), ("a", 2), ("b", 1)]
    assert dlq.committed() == []


def test_a_key_without_a_stable_hash_is_a_bad_record() -> None:
    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    items: list[Any] = [("a", 1), (["a", "list"], 2), ("b", 3)]
    env.from_source(ListSource(items)).key_by(lambda r: r[0], on_error="dead_letter").count().sink_to(out)
    _run(env)
    assert sorted(out.committed()) == [("a", 1), ("b", 1)]
    (letter,) = dlq.committed()
    assert letter["operator"] == "key_by" and letter["record"] == (["a", "list"], 2)
    assert letter["error"].startswith("UnhashableKeyError")


# -- event time and windows ---------------------------------------------------------------------
TIMED: list[Any] = [{"ts": 1.0, "v": 1}, {"ts": None, "v": 2}, {"ts": 2.0, "v": 3}, {"ts": 12.0, "v": 4}]


@pytest.mark.parametrize("policy", POLICIES)
def test_assign_timestamps_takes_out_records_without_a_time(policy: str) -> None:
    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts")
    (env.from_source(ListSource(TIMED)).assign_timestamps(strategy, on_error=policy)
        .key_by(lambda r: 0).window(Tumbling(10)).count().sink_to(out))
    result = _run(env)
    assert sorted(out.committed()) == [(0, 0.0, 10.0, 2), (0, 10.0, 20.0, 1)]
    if policy == "skip":
        assert result.operator("assign_timestamps").skipped_records == 1
    else:
        (letter,) = dlq.committed()
        assert letter["record"] == {"ts": None, "v": 2} and letter["error"].startswith("TimestampError")


@pytest.mark.parametrize("policy", POLICIES)
def test_a_window_skips_records_without_a_time_or_a_value(policy: str) -> None:
    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    items = [{"ts": 1.0, "v": 1}, {"ts": 1.5, "v": 2}, {"ts": 2.0, "v": "three"}, {"ts": 12.0, "v": 4}]
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp="ts")
    (env.from_source(ListSource(items), watermarks=strategy)
        .map(lambda r: {"v": 2} if r["v"] == 2 else r)  # a map that drops the event time
        .key_by(lambda r: 0).window(Tumbling(10)).sum("v", on_error=policy).sink_to(out))
    result = _run(env)
    assert sorted(out.committed()) == [(0, 0.0, 10.0, 1), (0, 10.0, 20.0, 4)]  # 1 + "three" fails
    if policy == "skip":
        assert result.operator("sum").skipped_records == 2
    else:
        letters = sorted(dlq.committed(), key=lambda d: d["error"])
        assert [d["record"] for d in letters] == [{"v": 2}, {"ts": 2.0, "v": "three"}]
        assert [d["error"].split(":")[0] for d in letters] == ["TimestampError", "TypeError"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_process_window_function_failing_on_a_window(policy: str) -> None:
    class Fragile(ProcessWindowFunction):
        def process(self, key: Any, window: Any, records: list[Any]) -> Any:
            if window.start == 10.0:
                raise RuntimeError("not this one")
            yield (key, window.start, len(records))

    dlq, out = CollectSink(), CollectSink()
    env = _env(dead_letter=dlq)
    strategy = WatermarkStrategy.for_monotonous_timestamps(timestamp=lambda r: r)
    (env.from_source(ListSource([1.0, 2.0, 11.0, 21.0]), watermarks=strategy)
        .key_by(lambda r: 0).window(Tumbling(10)).process(Fragile(), on_error=policy).sink_to(out))
    result = _run(env)
    assert sorted(out.committed()) == [(0, 0.0, 2), (0, 20.0, 1)]
    if policy == "skip":
        assert result.operator("process").skipped_records == 1
    else:
        (letter,) = dlq.committed()
        assert letter["record"] == "<window [10.0, 20.0) of key 0>"


# -- the dead-letter path -----------------------------------------------------------------------
def test_dead_letter_without_a_dead_letter_sink_is_a_graph_error() -> None:
    env = _env()
    with pytest.raises(GraphError, match=r"map\(on_error='dead_letter'\) needs the job's dead-letter sink"):
        env.from_source(ListSource(ITEMS)).map(str, on_error="dead_letter")
    with pytest.raises(ValueError, match="on_error must be"):
        env.from_source(ListSource(ITEMS)).map(str, on_error="ignore")  # type: ignore[arg-type]


def test_the_compiler_splits_dead_letters_off_to_one_sink() -> None:
    env = _env(parallelism=2, dead_letter=CollectSink())
    stream = env.from_source(ListSource(ITEMS)).map(str, on_error="dead_letter", name="parse")
    stream.filter(bool, on_error="dead_letter", name="check").sink_to(CollectSink(), name="out")
    names = [n.spec.name for n in env._graph.nodes]
    described = env.job_graph().describe()
    assert [n.spec.name for n in env._graph.nodes] == names  # the program's graph is left as built
    for name in ("parse-records", "parse-dead_letters", "check-records", "check-dead_letters",
                 "dead_letters-union", "dead_letters"):
        assert name in described
    uids = env.job_graph().operator_uids()
    assert "dead_letters" in uids


def test_records_are_kept_as_json_values_or_as_their_repr() -> None:
    assert json_value({"a": [1, 2.5, None, True, ("t", "u")]}) == {"a": [1, 2.5, None, True, ("t", "u")]}
    assert json_value(b"bytes") == "b'bytes'"
    assert json_value({1: "int key"}) == "{1: 'int key'}"


def test_dead_letters_are_committed_exactly_once_across_a_crash(tmp_path: Any) -> None:
    items: list[Any] = []
    for i in range(600):
        items.append(i if i % 7 else f"bad-{i}")
        if i == 450:
            items.append(Crash())
    dlq, out = CollectSink(), CollectSink()
    env = _env(
        parallelism=2, dead_letter=dlq, restart=RestartStrategy(max_restarts=1, delay=0), batch_size=16,
        checkpoint=CheckpointConfig(interval=0.01, directory=str(tmp_path / "ckpt")),
    )
    env.from_source(ListSource(items, splits=3)).map(lambda r: -r, on_error="dead_letter").sink_to(out)
    result = _run(env)
    assert result.restarts == 1 and result.restored_from[-1] is not None
    assert sorted(out.committed()) == sorted(-i for i in range(600) if i % 7)
    letters = sorted(d["record"] for d in dlq.committed())
    assert letters == sorted(f"bad-{i}" for i in range(600) if i % 7 == 0)  # each once


def test_a_poison_pill_ends_the_job_naming_the_record() -> None:
    env = _env(restart=RestartStrategy(max_restarts=5, delay=0))
    env.from_source(ListSource(ITEMS)).map(lambda r: r + 1, name="parse").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        _run(env)
    err = info.value
    assert err.recurring and err.attempts == 2  # not 6: the same record failed the same way twice
    assert isinstance(err.cause, OperatorError) and err.cause.record == "bad"
    assert "operator 'parse' failed on record 'bad'" in str(err) and "not restarted again" in str(err)


def test_a_failure_that_differs_between_attempts_uses_the_budget() -> None:
    calls = {"n": 0}

    def flaky(r: Any) -> Any:
        calls["n"] += 1
        raise ValueError(f"call {calls['n']}") if calls["n"] % 2 else KeyError("even")

    env = _env(restart=RestartStrategy(max_restarts=3, delay=0))
    env.from_source(ListSource(GOOD)).map(flaky).sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        _run(env)
    assert info.value.attempts == 4 and not info.value.recurring


def test_fail_names_the_source_position_in_the_sources_task() -> None:
    env = _env()
    env.from_source(ListSource(ITEMS, batch_size=2)).map(lambda r: r + 1).sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        _run(env)
    cause = info.value.cause
    assert isinstance(cause, OperatorError)
    assert cause.position == {"split": "list-0", "from": 2, "to": 4}
    assert "(split 'list-0', in the batch read from position 2 to position 4)" in str(info.value)


def test_a_job_that_fails_on_a_record_says_how_to_skip_or_dead_letter_it(tmp_path: Any, capsys: Any) -> None:
    """Issue 40: the failure names the operator, the record and where it was, and now also the
    two ways not to fail on it."""
    from epochal.cli.main import main

    job = tmp_path / "job.py"
    job.write_text(
        "from epochal import StreamEnvironment\n"
        "from epochal.testing import CollectSink, ListSource\n"
        "env = StreamEnvironment(parallelism=1)\n"
        "env.from_source(ListSource([1, 2, 'bad', 4])).map(lambda x: 10 // x, name='divide').sink_to(CollectSink())\n"
        "env.execute('poison')\n"
    )
    assert main(["run", str(job), "--executor", "inprocess"]) == 1
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("epochal: job 'poison' failed")]
    assert len(line) == 1 and "Traceback" not in err, err
    assert "operator 'divide' failed on record 'bad'" in line[0]
    assert 'on_error="skip" or on_error="dead_letter"' in line[0] and "docs/bad-records.md" in line[0]


def test_a_job_that_fails_for_another_reason_does_not_suggest_on_error() -> None:
    error = JobFailedError("j", 1, OperatorError("sink", "<committing checkpoint(s) [3]>", OSError("disk full")))
    assert "on_error" not in str(error)
