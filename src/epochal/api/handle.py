"""JobHandle: a job running in the background, and the ways to watch and steer it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..runtime.commands import Move, Patch, Rescale, Resize, Savepoint
from ..runtime.master.control import JobControl, JobStatus
from ..runtime.metrics import JobMetrics
from ..runtime.result import JobResult


class JobHandle:
    """A job started by `StreamEnvironment.execute_async`.

    `status()` is cheap and never blocks; `result()` waits for the end, as `execute()` does,
    and raises what `execute()` would have raised. `web_url` and `token` reach the same job from
    another process (`epochal status --url ...`).
    """

    def __init__(self, control: JobControl, run: Callable[[], JobResult], url: str | None, token: str | None) -> None:
        self._control = control
        self.web_url = url
        self.token = token
        self._result: JobResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(run,), name=f"epochal-job-{control.status().job}",
                                        daemon=True)
        self._thread.start()

    def _run(self, run: Callable[[], JobResult]) -> None:
        try:
            self._result = run()
        except BaseException as exc:  # handed to whoever calls result()
            self._error = exc

    @property
    def name(self) -> str:
        """The job's name."""
        return self._control.status().job

    def status(self) -> JobStatus:
        """The job's state, attempt, restarts and last checkpoint, as its job master last published."""
        return self._control.status()

    def metrics(self) -> JobMetrics | None:
        """The job's latest metrics snapshot (operators, tasks, checkpoints, restarts), or None
        before the first; the same data as the endpoint's `/metrics.json`."""
        return self._control.metrics()

    def query_state(self, operator: str, key: Any, *, live: bool = False, timeout: float = 10.0) -> dict[str, Any]:
        """The state of `key` in the operator with uid `operator`, by state name; `{}` if the key
        has none.

        By default read-committed: as of the job's last complete checkpoint, which is what the
        sinks have committed (`{}` before the first checkpoint). It reads the checkpoint's files
        for the key's key group only, on this thread, and costs the job nothing.
        With `live=True`, the value now: the subtask that owns the key answers between two of
        its batches (read-uncommitted: it includes records of the epoch in flight, which a
        failure would roll back and replay; it needs no checkpoint directory).

        Raises:
            NoCheckpointError: no operator with that uid; or, read-committed, no checkpoint
                directory.
            EpochalError: live, the operator has no keyed state or the job is not running.
            TimeoutError: live, no answer within `timeout` seconds.
        """
        if live:
            return self._control.query_live(operator, key, timeout)
        return self._control.query_state(operator, key)[1]

    def cancel(self) -> bool:
        """Ask the job to stop; returns at once (False if it had already ended)."""
        return self._control.request_cancel()

    def rescale(self, parallelism: int, timeout: float | None = None) -> int | None:
        """Change the job's parallelism while it runs; returns the checkpoint it rescaled at.

        With standby subtasks (`StreamEnvironment(max_workers=M)`) and `parallelism <= M`, the
        key groups (and source splits) move onto or off them at one checkpoint barrier: nothing
        restarts and nothing is replayed, and it returns once a checkpoint after that barrier wrote
        the moved groups at their new owners. Otherwise (no standby subtasks, `parallelism` beyond
        them, or a job whose key groups cannot move live) the job takes a checkpoint at once and
        relaunches its tasks at `parallelism` from it (rescaling by restore: nothing the
        checkpoint covers is replayed, and the sinks commit exactly once); it returns when the
        relaunch begins. Operators with their own `set_parallelism` keep it. A rescale to the
        parallelism the job runs at changes nothing and returns the newest complete checkpoint,
        None if there is none yet (`docs/concepts/elasticity.md`).

        Raises:
            ValueError: `parallelism` is not between 1 and the job's max_parallelism.
            EpochalError: the job has no checkpoint directory, or ended, or its checkpoint failed.
            TimeoutError: not done after `timeout` seconds (the rescale may still happen).
        """
        return self._control.submit(Rescale(parallelism)).wait(timeout)

    def move_key_groups(self, moves: Mapping[int, int], *, batch: int | None = None,
                        timeout: float | None = None) -> int:
        """Move key groups (`{key group: subtask}`) between the running subtasks of the job's keyed
        operators, live: nothing restarts and nothing is replayed. Returns the checkpoint the last
        of them moved at.

        A move happens at a checkpoint barrier: records before it are counted by the old owner,
        records after it by the new one, which takes the moved groups' state from that checkpoint
        and holds its input until it has them (`docs/concepts/elasticity.md`). The groups move in
        steps, one checkpoint each, of about `StateConfig.migration_step_bytes` of state (64 MiB
        by default: a quarter of a 1 GB state in four steps, of a small one in one), so that no
        step holds input back for long; with `batch`, of at most that many groups instead
        (`batch=len(moves)`: all at once). Returns once the new owners have taken over and a
        checkpoint after the last step wrote the groups there (the next move reads ahead from it).

        Raises:
            ValueError: a key group or subtask out of range, or moves that move nothing.
            EpochalError: the job has no checkpoint directory, has loops or unaligned checkpoints,
                is ending, or is moving key groups already.
            CheckpointError: the checkpoint failed; the job then restores the one before it,
                every key group where it was.
            TimeoutError: not done after `timeout` seconds (the move may still happen).
        """
        return self._control.submit(Move.of(moves, batch)).wait(timeout)

    def patch(self, operator: str, function: Any, timeout: float | None = None) -> int:
        """Replace the function of the operator with uid `operator` while the job runs; returns the
        checkpoint from which it runs: what that checkpoint commits is the old function's output,
        what follows it the new one's (`docs/concepts/elasticity.md`, live logic patches).

        Every subtask of the operator loads the function and (a `KeyedProcessFunction`) opens it
        first; then a checkpoint's barrier switches each of them to it, keeping their state. The
        checkpoint records the patch, so a restore from it or a later one runs the new function.
        Patchable: `map`, `filter`, `flat_map`, `map_batches`, `reduce`, `process`.

        Raises:
            ValueError: `function` is neither a function nor a process function.
            TypeError: the operator runs no function of that kind.
            EpochalError: no such operator, no checkpoint directory, the job is ending, another
                patch is under way, or a subtask refused it (it did not unpickle there, or its
                `open()` raised): the old function runs on.
            CheckpointError: the checkpoint that switched it aborted; the job restored the one
                before (the old function).
            TimeoutError: not done after `timeout` seconds (the patch may still happen).
        """
        return self._control.submit(Patch(operator, function)).wait(timeout)

    def resize(self, operator: str, processes: int, timeout: float | None = None) -> int:
        """Run the function of the operator with uid `operator` in `processes` processes per
        subtask from now on: vertical elasticity, more cores for a busy subtask with no state
        moved (`docs/concepts/elasticity.md`). The operator is a `map`, `filter` or `flat_map`
        given `processes=n`; new processes join its pool once they loaded the function, so the
        job never waits for them. Returns `processes` once every subtask's pool runs that many,
        each with the function loaded (a Python process starts in 0.1-2 s). A restart keeps the
        size. `epochal resize URL UID N` and `POST /resize?uid=UID&processes=N` do the same.

        Raises:
            ValueError: `processes` is not a positive int.
            EpochalError: no such operator, it runs no process pool, the job is not running, or
                the attempt ended (a failure) or a newer resize came before every pool ran it
                (the size stays in effect: a restarted job runs it).
            TimeoutError: not done after `timeout` seconds (the pools may grow later still).
        """
        return self._control.submit(Resize(operator, processes)).wait(timeout)

    def savepoint(self, target: str, timeout: float | None = None) -> str:
        """Take a savepoint of the running job into `target` (a new or empty directory).

        A checkpoint is triggered at once (not a copy of the last one); once it is complete, it
        is copied with every file it references into `target`, which a job can start from with
        `from_checkpoint=target`. Returns the savepoint's location.

        Raises:
            EpochalError: the job has no checkpoint directory, or ended, or the checkpoint failed.
            TimeoutError: not done after `timeout` seconds.
        """
        return self._control.submit(Savepoint(target)).wait(timeout)

    def result(self, timeout: float | None = None) -> JobResult:
        """The `JobResult` once the job ended.

        Raises:
            TimeoutError: the job is still running after `timeout` seconds.
            JobCancelledError: the job was cancelled.
            JobFailedError: the job failed for good.
        """
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"job {self.name!r} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def done(self) -> bool:
        """Whether the job ended (finished, failed or cancelled)."""
        return not self._thread.is_alive()

    def __repr__(self) -> str:
        status = self.status()
        return f"JobHandle({status.job!r}, {status.state.value}, parallelism={status.parallelism})"
