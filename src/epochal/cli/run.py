"""`epochal run JOB.py`: a job file run with overrides, a live progress display, and an end
that says what happened in one line.

- Every job the file executes reports its `JobResult` here (`RunOverrides.on_result`); its
  summary is the last line on stderr, counting the whole job (a resumed job's counts go on
  from its checkpoint: "of which ... since checkpoint N").
- Exit status: 0 when every job finished; 1 for an `EpochalError` (a failed, cancelled or
  refused job) or a mistake Epochal's argument checks found, printed as one line; 3 when a job
  finished but had to restore an older checkpoint than the newest, found corrupt (its summary
  says which and why).
- A job file that imports a library of one of the package's extras that is not installed
  (`import psycopg`) ends with one line naming the extra to install (`connectors.extras`).
- A `TypeError` or `ValueError` raised by Epochal's own checks of what the job file passed it
  (`StreamEnvironment(parallelism=0)`) is one line naming the job file's line, not a traceback;
  one raised by the job file's own code keeps its traceback, as does every error with `--verbose`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import runpy
import sys
import traceback

from ..api.overrides import RunOverrides, run_overrides
from ..cluster.session import SPARK_LOG_ENV, probe_master, stop_session, use_master
from ..connectors.extras import install_hint, missing_extra
from ..errors import EpochalError
from ..runtime.result import JobResult
from .progress import ProgressDisplay

FELL_BACK = 3  # exit status: finished, from an older checkpoint than the newest (found corrupt)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args: argparse.Namespace) -> int:
    """Run `args.job` under `args`' overrides (or on a service, `--service`); the exit status."""
    if args.service:
        from .submit import submit  # a client of `epochal serve`: no Spark here

        return submit(args)
    if not os.path.isfile(args.job):
        raise EpochalError(f"no such job file: {args.job!r}")
    if args.verbose:
        os.environ.setdefault(SPARK_LOG_ENV, "WARN")
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("epochal").setLevel(logging.INFO)
    master: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if args.master:
        probe_master(args.master)  # seconds, not a minute of Spark's retries
        master = use_master(args.master)  # the session is created when the job executes
    # a log on stderr would tear through the panel: with --verbose, plain lines between log lines
    display = ProgressDisplay(terminal=False if args.verbose else None)
    results: list[JobResult] = []
    overrides = RunOverrides(
        parallelism=args.parallelism,
        checkpoint_directory=args.checkpoint_dir,
        from_checkpoint=args.from_checkpoint,
        progress=display,
        executor=args.executor,
        allow_non_restored_state=args.allow_non_restored_state,
        web_port=args.web_port,
        on_result=results.append,
    )
    try:
        with master:
            run_job_file(args.job, args.job_args, overrides, tracebacks=args.verbose)
    finally:
        display.close()
        if args.master:
            stop_session()
    for line in summaries(results):
        print(line, file=sys.stderr, flush=True)
    return exit_status(results)


def run_job_file(job: str, job_args: list[str], overrides: RunOverrides, tracebacks: bool = False) -> None:
    """Run the job file `job` as `__main__` with `job_args` as its arguments, every environment
    it creates under `overrides`.

    Raises:
        EpochalError: also for a `TypeError` or `ValueError` Epochal's checks raised on what the
            job file passed (one line naming the file's line), unless `tracebacks`; and for an
            import of an extra's library that is not installed (naming the extra).
    """
    argv, sys.argv = sys.argv, [job, *job_args]
    try:
        with run_overrides(overrides):
            runpy.run_path(job, run_name="__main__")
    except ModuleNotFoundError as exc:
        missing = None if tracebacks else missing_extra(exc)
        if missing is None:
            raise
        module, extra = missing
        raise EpochalError(f"{os.path.basename(job)} needs the {module} library: {install_hint(extra)}") from None
    except (TypeError, ValueError) as exc:
        mistake = None if tracebacks else argument_mistake(exc, job)
        if mistake is None:
            raise
        raise EpochalError(mistake) from None
    finally:
        sys.argv = argv


def summaries(results: list[JobResult]) -> list[str]:
    """The last lines of a run: each job's summary."""
    return [f"epochal: {result.summary()}" for result in results]


def exit_status(results: list[JobResult]) -> int:
    """0, or `FELL_BACK` when a job restored an older checkpoint than the newest (found corrupt)."""
    return FELL_BACK if any(r.refused for r in results) else 0


def argument_mistake(exc: BaseException, job: str) -> str | None:
    """`exc` as one line naming the job file's line, if Epochal raised it checking an argument
    the job file passed (the error's last frame is Epochal's, a frame of the job file called it);
    None for an error of the job file's own code."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or not _ours(frames[-1].filename):
        return None
    job_path = os.path.abspath(job)
    calls = [f for f in frames if os.path.abspath(f.filename) == job_path]
    if not calls:
        return None
    return f"{exc} ({os.path.basename(job)}, line {calls[-1].lineno})"


def _ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE + os.sep)


__all__ = ["run", "run_job_file", "argument_mistake", "summaries", "exit_status", "FELL_BACK"]
