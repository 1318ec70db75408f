"""Errors a stream program can meet: failing user code, bad keys, invalid graphs.

A failing user function fails the job once the restart budget is spent, and the error names
the operator and the record, so the user can find both.
"""

from __future__ import annotations

import pytest

from epochal import (
    EpochalError,
    GraphError,
    JobFailedError,
    KeyedProcessFunction,
    OperatorError,
    RestartStrategy,
)
from epochal.errors import KeySelectorError
from epochal.testing import CollectSink, ListSource


class Explode(ValueError):
    pass


def _always_raise(record):
    raise Explode(f"cannot handle {record!r}")


def test_a_udf_that_always_raises_fails_the_job_after_the_restart_budget(make_env):
    attempts = []

    def failing(record):
        attempts.append(record)
        raise Explode("always")

    env = make_env(parallelism=2, restart=RestartStrategy(max_restarts=2))
    items = [f"rec-{i}" for i in range(10)]
    env.from_source(ListSource(items, splits=2)).map(failing, name="parse_record").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("always-fails")
    err = info.value
    assert isinstance(err, EpochalError)
    assert err.attempts == 2 and err.recurring and err.job == "always-fails"  # a poison pill: not 3
    assert len(attempts) == 2  # each attempt failed on its first record, the same way
    cause = err.cause
    assert isinstance(cause, OperatorError)
    assert err.__cause__ is cause
    assert cause.operator == "parse_record"
    assert cause.record in items
    assert isinstance(cause.cause, Explode)
    message = str(err)
    assert "parse_record" in message and repr(cause.record) in message and "Explode" in message


def test_the_error_names_the_record_that_failed(make_env):
    def fragile(x):
        return 100 // (x - 13)

    env = make_env(parallelism=1)
    env.from_source(ListSource(list(range(20)))).map(fragile, name="divide").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("one-bad-record")
    cause = info.value.cause
    assert (cause.operator, cause.record) == ("divide", 13)
    assert isinstance(cause.cause, ZeroDivisionError)
    assert "'divide'" in str(info.value) and "record 13" in str(info.value)


class RaisingProcess(KeyedProcessFunction):
    def process_element(self, value, ctx):
        raise Explode(value)


def _raising_reduce(acc, record):
    raise Explode(record)


@pytest.mark.parametrize(
    "build",
    [
        lambda s: s.map(_always_raise, name="the_op"),
        lambda s: s.filter(_always_raise, name="the_op"),
        lambda s: s.flat_map(_always_raise, name="the_op"),
        lambda s: s.flat_map(lambda r: None, name="the_op"),  # not iterable
        lambda s: s.key_by(lambda r: 0).reduce(_raising_reduce, name="the_op"),
        lambda s: s.key_by(lambda r: r).process(RaisingProcess(), name="the_op"),
    ],
    ids=["map", "filter", "flat_map", "flat_map-none", "reduce", "process"],
)
def test_every_udf_operator_names_itself_and_the_record(make_env, build):
    env = make_env(parallelism=1)
    build(env.from_source(ListSource(["first", "second"]))).sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("udf-error")
    cause = info.value.cause
    assert isinstance(cause, OperatorError)
    assert cause.operator == "the_op"
    assert cause.record in ("first", "second")
    assert "'the_op'" in str(info.value) and repr(cause.record) in str(info.value)


def test_a_failing_open_names_the_operator(make_env):
    class BadOpen(KeyedProcessFunction):
        def open(self, ctx):
            raise Explode("no state for you")

        def process_element(self, value, ctx):
            yield value

    env = make_env(parallelism=1)
    env.from_source(ListSource([1])).key_by(lambda x: x).process(BadOpen(), name="bad_open").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("bad-open")
    assert isinstance(info.value.cause, OperatorError)
    assert info.value.cause.operator == "bad_open"
    assert "no state for you" in str(info.value)


def test_long_records_are_shortened_in_the_message(make_env):
    env = make_env(parallelism=1)
    def reject(record):
        raise Explode("too long")

    env.from_source(ListSource(["x" * 10_000])).map(reject, name="long").sink_to(CollectSink())
    with pytest.raises(JobFailedError) as info:
        env.execute("long-record")
    assert info.value.cause.record == "x" * 10_000
    message = str(info.value.cause)
    assert len(message) < 1_000
    assert "'long'" in message and "too long" in message and "xxx" in message


# -- key selectors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 2], ids=["in-operator", "in-partitioner"])
def test_a_key_selector_returning_a_list_names_the_operator(make_env, parallelism):
    env = make_env(parallelism=parallelism)
    env.from_source(ListSource(["a b", "c"])).key_by(lambda line: line.split()).count(name="count_words").sink_to(
        CollectSink()
    )
    with pytest.raises(JobFailedError) as info:
        env.execute("list-key")
    cause = info.value.cause
    assert isinstance(cause, KeySelectorError) and isinstance(cause, OperatorError)
    assert cause.operator == "count_words"
    assert cause.record in ("a b", "c")
    assert "list" in str(cause) and "'count_words'" in str(info.value)


@pytest.mark.parametrize("parallelism", [1, 2], ids=["in-operator", "in-partitioner"])
def test_a_missing_arrow_key_column_names_the_operator(make_env, parallelism):
    env = make_env(parallelism=parallelism)
    env.from_source(ListSource(["a", "b"])).map_batches(lambda b: b).key_by("word").count(name="by_word").sink_to(
        CollectSink()
    )
    with pytest.raises(JobFailedError) as info:
        env.execute("missing-column")
    cause = info.value.cause
    assert isinstance(cause, KeySelectorError)
    assert cause.operator == "by_word"
    assert "word" in str(cause)


# -- invalid programs ------------------------------------------------------------------------------


def test_a_graph_without_a_sink_is_refused(make_env):
    env = make_env()
    env.from_source(ListSource([1])).map(str)
    with pytest.raises(GraphError, match="no sink"):
        env.job_graph()
    with pytest.raises(GraphError, match="no sink"):
        env.execute("no-sink")


def test_an_empty_program_is_refused(make_env):
    with pytest.raises(GraphError):
        make_env().execute("empty")


def test_duplicate_uids_are_refused(make_env):
    env = make_env()
    src = env.from_source(ListSource([1]))
    src.map(str).uid("same").sink_to(CollectSink())
    src.filter(bool).uid("same").sink_to(CollectSink())
    with pytest.raises(GraphError, match="uid 'same'"):
        env.job_graph()
    with pytest.raises(GraphError):
        env.execute("duplicate-uid")


def test_duplicate_names_are_refused(make_env):
    env = make_env()
    src = env.from_source(ListSource([1]))
    src.map(str, name="twin").sink_to(CollectSink())
    src.map(repr).named("twin").sink_to(CollectSink())
    with pytest.raises(GraphError, match="name 'twin'"):
        env.job_graph()


def test_distinct_uids_make_equal_names_unique_state_ids(make_env):
    env = make_env()
    src = env.from_source(ListSource([1]))
    src.map(str).named("m1").uid("state-a").sink_to(CollectSink())
    src.map(str).uid("state-b").named("m2").sink_to(CollectSink())
    uids = env.job_graph().operator_uids()
    assert "state-a" in uids and "state-b" in uids
    assert "m1" not in uids and "m2" not in uids
    env.execute("uids")


def test_generated_names_never_collide_with_chosen_names(make_env):
    env = make_env()
    src = env.from_source(ListSource([1]))
    src.map(str, name="map_2").sink_to(CollectSink())
    src.map(str).sink_to(CollectSink())
    src.map(str).sink_to(CollectSink())
    names = [op.name for v in env.job_graph().vertices for op in v.chain]
    assert len(names) == len(set(names))


def test_sources_and_sinks_are_type_checked(make_env):
    env = make_env()
    with pytest.raises(TypeError):
        env.from_source([1, 2, 3])
    with pytest.raises(TypeError):
        env.from_source(ListSource([1])).sink_to(print)


def test_unknown_executor_is_refused():
    from epochal import StreamEnvironment

    with pytest.raises(ValueError, match="executor"):
        StreamEnvironment(1, executor="threads")
