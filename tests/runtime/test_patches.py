"""Live logic patches (`epochal.runtime.patches`): a new function switched in at one barrier.

The jobs read a paced sequence and tag each record with the function's version; a sink that
keeps the checkpoint each record was committed with shows the cut: every record committed by
the patch's checkpoint or before carries the old tag, every one after it the new tag, each once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from epochal import (
    CheckpointConfig,
    EpochalError,
    KeyedProcessFunction,
    MapFunction,
    RestartStrategy,
    Sink,
    SinkWriter,
    StreamEnvironment,
)
from epochal.state.storage import CheckpointStorage
from spark_jobs import EndlessSource

RECORDS = 3_000


class _EpochWriter(SinkWriter):
    def __init__(self, subtask: int) -> None:
        self.subtask = subtask
        self.buffer: list[Any] = []

    def write(self, batch: Any) -> None:
        self.buffer.extend(batch)

    def prepare_commit(self, checkpoint_id: int) -> Any:
        staged, self.buffer = self.buffer, []
        return (checkpoint_id, self.subtask, staged)


class EpochSink(Sink):
    """Commits each checkpoint's records with its id: `(checkpoint, record)` pairs; a commit the
    job repeats after a restore (of the checkpoint it restores) counts once."""

    def __init__(self) -> None:
        self.committed: list[tuple[int, Any]] = []
        self._seen: set[tuple[int, int]] = set()

    def create_writer(self, subtask: int, parallelism: int) -> SinkWriter:
        return _EpochWriter(subtask)

    def commit(self, committables: list[Any]) -> None:
        for checkpoint_id, subtask, records in committables:
            if (checkpoint_id, subtask) not in self._seen:
                self._seen.add((checkpoint_id, subtask))
                self.committed.extend((checkpoint_id, r) for r in records)


def _wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _old(x: int) -> tuple[int, str]:
    return (x, "old")


def _new(x: int) -> tuple[int, str]:
    return (x, "new")


def _run_until(env: StreamEnvironment, act: Any, records: int = RECORDS) -> Any:
    """Run the job, `act(handle)` once a checkpoint completed, cancel once `records` are committed."""
    handle = env.execute_async("patched")
    _wait_for(lambda: handle.status().last_checkpoint is not None)
    outcome = act(handle)
    return handle, outcome


def _sequence_job(tmp_path: Path, sink: EpochSink, restarts: int = 0) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, executor="inprocess", restart=RestartStrategy(max_restarts=restarts),
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=RECORDS)).rebalance().map(_old, name="tag").sink_to(sink)
    return env


def _finish(handle: Any, sink: EpochSink) -> None:
    """Cancel once every record of the source is committed (so the patch landed mid-stream)."""
    _wait_for(lambda: len(sink.committed) >= RECORDS)
    handle.cancel()
    with pytest.raises(EpochalError):
        handle.result(timeout=30)


def _check_cut(committed: list[tuple[int, Any]], at: int) -> None:
    old = [r for c, r in committed if c <= at]
    new = [r for c, r in committed if c > at]
    assert old and new, "the patch must land mid-stream"
    assert {tag for _, tag in old} == {"old"} and {tag for _, tag in new} == {"new"}


def test_a_patched_map_switches_at_one_checkpoint_and_commits_every_record_once(tmp_path: Path) -> None:
    sink = EpochSink()
    handle, at = _run_until(_sequence_job(tmp_path, sink), lambda h: h.patch("tag", _new, timeout=60))
    _finish(handle, sink)
    _check_cut(sink.committed, at)
    values = [x for _, (x, _) in sink.committed]
    assert sorted(values) == list(range(len(values))), "every record once"
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    latest = storage.load_manifest(max(storage.complete_checkpoints()))
    assert latest.checkpoint_id > at
    assert [(p.uid, p.since) for p in latest.patches] == [("tag", at)], "every checkpoint after it records it"
    assert storage.read_file(latest.patches[0].file), "its function is in a file the manifest checks"


class _Count(KeyedProcessFunction):
    """A running count per key, tagged with this version."""

    version = "v1"

    def open(self, ctx: Any) -> None:
        self.count = ctx.value_state("count", 0)

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        n = self.count.value() + 1
        self.count.update(n)
        yield (ctx.key, n, self.version)


class _CountV2(_Count):
    version = "v2"


def test_a_patched_process_function_keeps_its_state(tmp_path: Path) -> None:
    sink = EpochSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=RECORDS)).key_by(lambda x: x % 7).process(_Count(), name="count").sink_to(
        sink)
    handle, at = _run_until(env, lambda h: h.patch("count", _CountV2(), timeout=60))
    _finish(handle, sink)
    by_key: dict[int, list[tuple[int, str]]] = {}
    for checkpoint, (key, n, version) in sink.committed:
        by_key.setdefault(key, []).append((n, version))
        assert version == ("v1" if checkpoint <= at else "v2")
    for key, seen in by_key.items():
        assert [n for n, _ in sorted(seen)] == list(range(1, len(seen) + 1)), f"key {key}: the count went on"


def test_a_patch_that_fails_to_open_is_refused_and_the_old_function_runs_on(tmp_path: Path) -> None:
    class Broken(_CountV2):
        def open(self, ctx: Any) -> None:
            raise RuntimeError("cannot connect")

    sink = EpochSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=RECORDS)).key_by(lambda x: x % 7).process(_Count(), name="count").sink_to(
        sink)

    def refused(handle: Any) -> None:
        with pytest.raises(EpochalError, match=r"refused, the old function runs on: .*RuntimeError: cannot connect"):
            handle.patch("count", Broken(), timeout=60)

    handle, _ = _run_until(env, refused)
    _finish(handle, sink)
    assert {version for _, (_, _, version) in sink.committed} == {"v1"}


class _Unloadable:
    """Pickles, but raises when unpickled: a function whose module the workers lack."""

    def __call__(self, x: int) -> Any:
        return (x, "never")

    def __reduce__(self) -> Any:
        return (_fail_to_load, ())


def _fail_to_load() -> Any:
    raise ModuleNotFoundError("No module named 'fixes'")


def test_a_patch_that_does_not_load_on_a_subtask_is_refused(tmp_path: Path) -> None:
    sink = EpochSink()

    def refused(handle: Any) -> None:
        with pytest.raises(EpochalError, match=r"refused.*ModuleNotFoundError: No module named 'fixes'"):
            handle.patch("tag", _Unloadable(), timeout=60)

    handle, _ = _run_until(_sequence_job(tmp_path, sink), refused)
    _finish(handle, sink)
    assert {tag for _, (_, tag) in sink.committed} == {"old"}


def test_what_cannot_be_patched_is_refused_where_it_is_asked(tmp_path: Path) -> None:
    sink = EpochSink()

    def refusals(handle: Any) -> list[str]:
        out = []
        for uid, function in [("no-such-operator", _new), ("sink", _new), ("tag", object())]:
            with pytest.raises((EpochalError, TypeError, ValueError)) as caught:
                handle.patch(uid, function, timeout=30)
            out.append(str(caught.value))
        return out

    handle, said = _run_until(_sequence_job(tmp_path, sink), refusals)
    _finish(handle, sink)
    assert "no operator with uid 'no-such-operator'" in said[0]
    assert "runs no function a patch can replace" in said[1]
    assert "a patch needs a function" in said[2]


_FAILED: list[int] = []


def _new_failing_once(x: int) -> tuple[int, str]:
    if x == RECORDS - 500 and not _FAILED:
        _FAILED.append(x)
        raise ValueError("injected after the patch")
    return (x, "new")


def test_a_patch_survives_a_failure_after_its_checkpoint(tmp_path: Path) -> None:
    """The attempt after the failure restores a checkpoint that records the patch: it runs the
    new function though the program still names the old one."""
    _FAILED.clear()
    sink = EpochSink()
    handle, at = _run_until(_sequence_job(tmp_path, sink, restarts=2),
                            lambda h: h.patch("tag", _new_failing_once, timeout=60))
    _finish(handle, sink)
    assert _FAILED, "the failure must come after the patch"
    assert handle.status().restarts == 1
    _check_cut(sink.committed, at)
    values = [x for _, (x, _) in sink.committed]
    assert sorted(values) == list(range(len(values))), "every record once"


# -- the job master's side alone ---------------------------------------------------------------------
def _patch_log(tmp_path: Path) -> tuple[Any, Any, list[Any], list[Any]]:
    """A job master's patch log and coordinator over a tiny job, with what they sent and failed."""
    from epochal.plan.job_graph import TaskId
    from epochal.runtime.clock import VirtualClock
    from epochal.runtime.commands import Patch, Ticket
    from epochal.runtime.master.coordinator import CheckpointCoordinator
    from epochal.runtime.master.patches import PatchLog
    from epochal.runtime.wire.messages import PatchStaged

    env = StreamEnvironment(parallelism=2, executor="inprocess",
                            checkpoint=CheckpointConfig(directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource()).map(_old, name="tag").sink_to(EpochSink())
    job = env.job_graph("tiny")
    sent: list[Any] = []
    failures: list[Any] = []
    storage = CheckpointStorage(str(tmp_path / "ckpt"))
    patches = PatchLog(job, None)
    coordinator = CheckpointCoordinator(job, storage, VirtualClock(), lambda t, m: sent.append((t, m)),
                                        on_failure=failures.append, patches=patches,
                                        on_aborted=lambda aborted: patches.aborted(aborted.checkpoint_id))
    ticket: Ticket[int] = Ticket(Patch("tag", _new))
    patches.submit(ticket, lambda t, m: sent.append((t, m)), storage, ending=False)
    for task in [TaskId(v.id, i) for v in job.vertices for i in range(v.parallelism)
                 if any(op.uid == "tag" for op in v.chain)]:
        patches.staged(PatchStaged(task, 1), lambda t, m: sent.append((t, m)),
                       lambda: coordinator.trigger(aligned=True))
    return patches, coordinator, ticket, failures


def test_the_checkpoint_that_switches_carries_the_patch_and_its_abort_fails_the_attempt(tmp_path: Path) -> None:
    from epochal.errors import CheckpointError
    from epochal.runtime.wire.messages import DeclineCheckpoint

    patches, coordinator, ticket, failures = _patch_log(tmp_path)
    checkpoint = patches.under_way.checkpoint
    assert checkpoint is not None and coordinator.pending[checkpoint].patch == 1
    coordinator.on_decline(DeclineCheckpoint(next(iter(coordinator.tasks)), checkpoint, "refused"))
    assert failures and "switched in a patch, was aborted" in str(failures[0])
    assert patches.under_way is None
    with pytest.raises(CheckpointError, match="restores the checkpoint before it, with the old function"):
        ticket.wait(0)


class _Tagging(MapFunction[int, tuple[int, str]]):
    """A rich map: what its lifecycle did goes to `EVENTS`."""

    tag = ""
    EVENTS: ClassVar[list[tuple[str, str, int]]] = []

    def open(self, ctx: Any) -> None:
        self.subtask = ctx.subtask
        self.mapped = ctx.operator_list_state("mapped")
        _Tagging.EVENTS.append((self.tag, "open", ctx.subtask))

    def map(self, value: int) -> tuple[int, str]:
        return (value, self.tag)

    def close(self) -> None:
        _Tagging.EVENTS.append((self.tag, "close", self.subtask))


class OldTag(_Tagging):
    tag = "old"


class NewTag(_Tagging):
    tag = "new"


def test_a_patched_rich_map_opens_the_new_function_and_closes_the_old(tmp_path: Path) -> None:
    _Tagging.EVENTS.clear()
    sink = EpochSink()
    env = StreamEnvironment(parallelism=2, executor="inprocess", restart=RestartStrategy(max_restarts=0),
                            checkpoint=CheckpointConfig(interval=0.05, directory=str(tmp_path / "ckpt")))
    env.from_source(EndlessSource(stop_at=RECORDS)).rebalance().map(OldTag(), name="tag").sink_to(sink)
    handle, at = _run_until(env, lambda h: h.patch("tag", NewTag(), timeout=60))
    _finish(handle, sink)
    _check_cut(sink.committed, at)
    events = _Tagging.EVENTS
    for subtask in (0, 1):
        mine = [(tag, what) for tag, what, s in events if s == subtask]
        assert mine == [("old", "open"), ("old", "close"), ("new", "open"), ("new", "close")], mine
