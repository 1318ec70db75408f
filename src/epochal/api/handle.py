"""JobHandle: a job running in the background, and the ways to watch and steer it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..runtime.control import JobControl, JobStatus
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

    def cancel(self) -> bool:
        """Ask the job to stop; returns at once (False if it had already ended)."""
        return self._control.request_cancel()

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
