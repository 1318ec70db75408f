"""`epochal`: run job files, inspect checkpoints and history, keep a SparkSession warm.

    epochal run JOB.py [--master URL] [--parallelism N] [--checkpoint-dir D]
                       [--from-checkpoint auto|latest|ID|PATH] [--allow-non-restored-state]
                       [--executor spark|inprocess] [--verbose] [--web-port N]
                       [--service URL [--service-token TOKEN]] [-- ARGS]
    epochal serve [--master URL] [--host H] [--port N] [--token TOKEN] [--verbose]
    epochal status URL
    epochal cancel URL [--token TOKEN]
    epochal rescale URL N [--token TOKEN]
    epochal move URL GROUPS SUBTASK [--batch N] [--token TOKEN]
    epochal patch URL UID FILE.py:NAME|MODULE:NAME [--token TOKEN]
    epochal resize URL UID N [--token TOKEN]
    epochal query URL UID KEY [--live]
    epochal checkpoints list D
    epochal history D [--run RUN] [--json] [--web-port N]
    epochal savepoint D|URL TARGET [--checkpoint latest|ID] [--token TOKEN]
    epochal savepoint rescale-groups SRC DST --max-parallelism N [--checkpoint latest|ID]
    epochal --version

Mistakes a user makes (a missing job file or checkpoint directory, a URI no filesystem
serves, a Spark master that cannot be reached or is no URL, a job that must not start over
earlier output, an argument Epochal's checks refuse) end with one line, `epochal: <message>`,
and status 1, not a traceback; a job that finished from an older checkpoint than the newest
(found corrupt) ends with status 3 (`cli.run`). Spark starts only when the job executes, after
its start checks; its start-up logging stays quiet unless `--verbose`. docs/operations.md
documents every flag (tests/docs checks it against `build_parser`).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import sys
import urllib.parse
from collections.abc import Sequence

from ..cluster.endpoint import call
from ..cluster.session import SPARK_LOG_ENV
from ..errors import EpochalError, NoCheckpointError
from ..state.savepoints import create_savepoint
from ..state.storage import CheckpointStorage
from .history import history as _history
from .run import run as _run

TOKEN_ENV = "EPOCHAL_TOKEN"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _open_storage(directory: str) -> CheckpointStorage:
    """The checkpoint directory `directory`, which must exist; never creates it."""
    missing = f"no such checkpoint directory: {directory!r}"
    if not directory.strip():
        raise NoCheckpointError(missing)
    try:
        return CheckpointStorage(directory, create=False)
    except NoCheckpointError as exc:
        raise NoCheckpointError(missing) from exc
    except (OSError, ValueError) as exc:  # pyarrow: a scheme it does not know, a host it cannot reach
        raise NoCheckpointError(f"{missing} ({exc})") from exc


def _status(args: argparse.Namespace) -> int:
    _, status = call(args.url, "/status")
    if "state" not in status:
        raise EpochalError(f"{args.url} is not an Epochal job's endpoint")
    last = status.get("last_checkpoint")
    print(f"job {status['job']!r}: {status['state']}, parallelism {status['parallelism']}, "
          f"attempt {status['attempt']}, restarts {status['restarts']}, "
          f"last checkpoint {'-' if last is None else last}")
    for failure in status.get("failures", []):
        print(f"  failed: {failure}")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise EpochalError(f"cancel needs the job's token: --token TOKEN or {TOKEN_ENV} (the job printed it at start)")
    code, body = call(args.url, "/cancel", token)
    if code == 401:
        raise EpochalError("the job refused the token")
    if not body.get("cancel"):
        raise EpochalError(f"the job has already ended ({body.get('status', {}).get('state', 'unknown')})")
    print(f"cancel requested; the job stops at its next step ({args.url}/status shows when)")
    return 0


def _act(args: argparse.Namespace, url: str, path: str) -> dict[str, object]:
    """POST an action to the running job at `url` with its token; the answer's body."""
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise EpochalError(f"this needs the job's token: --token TOKEN or {TOKEN_ENV} (the job printed it at start)")
    code, body = call(url, path, token, timeout=330)
    if code == 401:
        raise EpochalError("the job refused the token")
    if code >= 400:
        raise EpochalError(str(body.get("error", f"the job answered {code}")))
    return body


def _rescale(args: argparse.Namespace) -> int:
    body = _act(args, args.url, f"/rescale?parallelism={args.parallelism}")
    at = body["rescale"]
    print(f"rescaled to {args.parallelism} at checkpoint {at}" if at is not None
          else f"runs at parallelism {args.parallelism} already")
    return 0


def _patch(args: argparse.Namespace) -> int:
    from ..cluster.patch_request import request_body

    body = request_body(args.function)  # before the token: a function that does not load says so first
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise EpochalError(f"this needs the job's token: --token TOKEN or {TOKEN_ENV} (the job printed it at start)")
    code, answer = call(args.url, "/patch?" + urllib.parse.urlencode({"uid": args.uid}), token, timeout=330,
                        data=body)
    if code == 401:
        raise EpochalError("the job refused the token")
    if code >= 400:
        raise EpochalError(str(answer.get("error", f"the job answered {code}")))
    print(f"{args.uid} runs {args.function} from checkpoint {answer['patch']} on")
    return 0


def _resize(args: argparse.Namespace) -> int:
    _act(args, args.url, "/resize?" + urllib.parse.urlencode({"uid": args.uid, "processes": args.processes}))
    print(f"{args.uid} runs {args.processes} processes per subtask")
    return 0


def _move(args: argparse.Namespace) -> int:
    query = {"groups": args.groups, "to": str(args.subtask)}
    if args.batch:
        query["batch"] = str(args.batch)
    body = _act(args, args.url, "/move?" + urllib.parse.urlencode(query))
    print(f"key groups {args.groups} moved to subtask {args.subtask} (last at checkpoint {body['move']})")
    return 0


def _query(args: argparse.Namespace) -> int:
    path = f"/state/{urllib.parse.quote(args.uid, safe='')}/{urllib.parse.quote(args.key, safe='')}"
    code, body = call(args.url, path + ("?live=1" if args.live else ""))
    if code >= 400:
        raise EpochalError(str(body.get("error", f"the job answered {code}")))
    at = "live" if body.get("live") else f"checkpoint {body.get('checkpoint')}"
    state = body.get("state") or {}
    print(f"{body['operator']} {body['key']!r} ({at}): " + (", ".join(f"{k}={v!r}" for k, v in state.items())
                                                          or "no state"))
    return 0


def _checkpoints_list(args: argparse.Namespace) -> int:
    storage = _open_storage(args.directory)
    rows = []
    for checkpoint_id in storage.complete_checkpoints():
        try:
            m = storage.load_manifest(checkpoint_id)
        except EpochalError as exc:
            rows.append((str(checkpoint_id), "corrupt", "-", "-", str(exc)))
            continue
        when = datetime.datetime.fromtimestamp(m.created_at).isoformat(sep=" ", timespec="seconds")
        note = "final" if m.is_final else ""
        rows.append((str(checkpoint_id), when, f"{m.size:,}", f"{m.duration_ms:.1f}", note))
    header = ("id", "time", "bytes", "duration ms", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print(f"(no complete checkpoints in {args.directory})")
    return 0


def _savepoint(args: argparse.Namespace) -> int:
    if args.directory.startswith(("http://", "https://")):  # a running job: a new checkpoint, copied out
        target = os.path.abspath(args.target) if "://" not in args.target else args.target
        body = _act(args, args.directory, "/savepoint?" + urllib.parse.urlencode({"target": target}))
        print(f"savepoint of the running job written to {body['savepoint']}")
        return 0
    storage = _open_storage(args.directory)
    manifest = create_savepoint(storage, args.checkpoint, args.target)
    print(
        f"savepoint of checkpoint {manifest.checkpoint_id} written to {args.target} "
        f"({manifest.full_size():,} bytes, operators {', '.join(op.uid for op in manifest.operators)})"
    )
    return 0


def _rescale_groups(args: argparse.Namespace) -> int:
    from ..runtime.windowing.table_state import SPLITTERS  # window tables keep an entry per key group
    from ..state.regroup import regroup_savepoint

    try:
        manifest = regroup_savepoint(args.source, args.target, args.max_parallelism, checkpoint=args.checkpoint,
                                     splitters=SPLITTERS)
    except ValueError as exc:
        raise EpochalError(str(exc)) from exc
    print(
        f"savepoint of checkpoint {manifest.checkpoint_id} with {args.max_parallelism:,} key groups written to "
        f"{args.target} ({manifest.full_size():,} bytes); start the job from it with "
        f"StateConfig(max_parallelism={args.max_parallelism})"
    )
    return 0


# `epochal savepoint rescale-groups ...` is one command: `main` joins its two words into this
# name before parsing, as `savepoint` itself takes a directory as its first word.
RESCALE_GROUPS = "savepoint rescale-groups"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: `run`, `serve`, `status`, `cancel`, `rescale`, `move`, `patch`, `resize`,
    `query`, `checkpoints list`, `history`, `savepoint` and `savepoint rescale-groups`."""
    parser = argparse.ArgumentParser(prog="epochal", description="Exactly-once stream processing on Spark")
    parser.add_argument("--version", action="version", version=f"epochal {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a job file")
    run.add_argument("job", help="a Python file that builds a StreamEnvironment and calls execute()")
    run.add_argument(
        "--master", metavar="URL", help="Spark master URL (default: the embedded local[*]); checked at once"
    )
    run.add_argument("--parallelism", type=_positive_int, metavar="N", help="default parallelism of every environment")
    run.add_argument("--checkpoint-dir", metavar="D", help="checkpoint directory (any pyarrow filesystem URI)")
    run.add_argument(
        "--from-checkpoint",
        metavar="auto|latest|ID|PATH",
        help="'auto' (the latest complete checkpoint if there is one, else a fresh start: for a driver a "
        "supervisor restarts), 'latest', a checkpoint id, a chk-NNNNNNNN path, or a savepoint directory",
    )
    run.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="start even if the checkpoint holds state of operator uids the job no longer has",
    )
    run.add_argument(
        "--executor", choices=["spark", "inprocess"], help="override the job's executor (inprocess: no Spark)"
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help=f"show Spark's start-up and WARN log lines (or set {SPARK_LOG_ENV}=LEVEL) and Epochal's INFO log",
    )
    run.add_argument(
        "--web-port", type=int, default=0, metavar="N",
        help="port of the job's control endpoint on 127.0.0.1 (default 0: a free one; the URL and token are printed)",
    )
    run.add_argument("--service", metavar="URL",
                     help="run the job on a running `epochal serve` (its warm SparkSession) instead of here")
    run.add_argument("--service-token", metavar="TOKEN",
                     help="the token `epochal serve` printed (or set EPOCHAL_SERVICE_TOKEN)")
    run.set_defaults(func=_run)

    serve = sub.add_parser("serve", help="keep a SparkSession warm and run the job files sent to it")
    serve.add_argument("--master", metavar="URL", help="Spark master URL (default: the embedded local[*])")
    serve.add_argument("--host", default="127.0.0.1", help="the interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8787, metavar="N", help="the port (default 8787; 0: a free one)")
    serve.add_argument("--token", help="the token clients send (default: a fresh one, printed)")
    serve.add_argument("--verbose", action="store_true", help="Spark's WARN log and Epochal's INFO log")
    serve.set_defaults(func=_serve)

    status = sub.add_parser("status", help="show a running job's state (its URL was printed at start)")
    status.add_argument("url", help="the job's control endpoint, e.g. http://127.0.0.1:41234")
    status.set_defaults(func=_status)

    cancel = sub.add_parser("cancel", help="stop a running job; nothing after its last checkpoint is committed")
    cancel.add_argument("url", help="the job's control endpoint")
    cancel.add_argument("--token", help=f"the token the job printed at start (or set {TOKEN_ENV})")
    cancel.set_defaults(func=_cancel)

    checkpoints = sub.add_parser("checkpoints", help="inspect checkpoints")
    csub = checkpoints.add_subparsers(dest="action", required=True)
    lst = csub.add_parser("list", help="list complete checkpoints")
    lst.add_argument("directory", help="the job's checkpoint directory (a path or a pyarrow filesystem URI)")
    lst.set_defaults(func=_checkpoints_list)

    sp = sub.add_parser(
        "savepoint", help="copy a complete checkpoint into a self-contained directory you own"
    )
    sp.add_argument("directory", help="the job's checkpoint directory, or a running job's URL (a new checkpoint)")
    sp.add_argument("target", help="where the savepoint goes (must not exist, or be empty)")
    sp.add_argument("--checkpoint", default="latest", metavar="latest|ID", help="'latest' (default) or a checkpoint id")
    sp.add_argument("--token", help=f"for a running job: the token it printed at start (or set {TOKEN_ENV})")
    sp.set_defaults(func=_savepoint)

    regroup = sub.add_parser(
        RESCALE_GROUPS, help="re-split a savepoint's keyed state into another number of key groups (max parallelism)"
    )
    regroup.add_argument("source", help="a savepoint directory, or a job's checkpoint directory")
    regroup.add_argument("target", help="where the new savepoint goes (must not exist, or be empty)")
    regroup.add_argument("--max-parallelism", type=_positive_int, required=True, metavar="N",
                         help="the new number of key groups (up to 32768)")
    regroup.add_argument("--checkpoint", default="latest", metavar="latest|ID",
                         help="of a checkpoint directory: 'latest' (default) or a checkpoint id")
    regroup.set_defaults(func=_rescale_groups)

    rescale = sub.add_parser("rescale", help="change a running job's parallelism (live, or by restore)")
    rescale.add_argument("url", help="the job's control endpoint")
    rescale.add_argument("parallelism", type=_positive_int, help="the new parallelism")
    rescale.add_argument("--token", help=f"the token the job printed at start (or set {TOKEN_ENV})")
    rescale.set_defaults(func=_rescale)

    move = sub.add_parser("move", help="move key groups to another running subtask, live (no restart)")
    move.add_argument("url", help="the job's control endpoint")
    move.add_argument("groups", help="key groups, e.g. 0-31 or 0-3,7")
    move.add_argument("subtask", type=int, help="the subtask (0-based) that takes them")
    move.add_argument("--batch", type=_positive_int, help="move at most this many per checkpoint "
                      "(default: steps of the job's StateConfig.migration_step_bytes of state)")
    move.add_argument("--token", help=f"the token the job printed at start (or set {TOKEN_ENV})")
    move.set_defaults(func=_move)

    hist = sub.add_parser("history", help="what a job's runs recorded in its checkpoint directory (after they ended)")
    hist.add_argument("directory", help="the job's checkpoint directory (a path or a pyarrow filesystem URI)")
    hist.add_argument("--run", metavar="RUN", help="the run to show (an id or its prefix; default: the newest)")
    hist.add_argument("--json", action="store_true", help="print the run's record as stored (JSON)")
    hist.add_argument("--web-port", type=int, metavar="N",
                      help="serve the run's dashboard on 127.0.0.1:N (0: a free port) until interrupted")
    hist.set_defaults(func=_history)

    patch = sub.add_parser("patch", help="run a new function in a running job's operator, from one checkpoint on")
    patch.add_argument("url", help="the job's control endpoint")
    patch.add_argument("uid", help="the operator's uid (its name unless `.uid(...)` set one)")
    patch.add_argument("function", help="the new function: path/to/file.py:NAME (shipped by value) or "
                       "module:NAME (the workers must import it)")
    patch.add_argument("--token", help=f"the token the job printed at start (or set {TOKEN_ENV})")
    patch.set_defaults(func=_patch)

    resize = sub.add_parser("resize", help="run a map/filter/flat_map's function in N processes per subtask, live")
    resize.add_argument("url", help="the job's control endpoint")
    resize.add_argument("uid", help="the operator's uid (given processes=n in the job)")
    resize.add_argument("processes", type=_positive_int, help="processes per subtask")
    resize.add_argument("--token", help=f"the token the job printed at start (or set {TOKEN_ENV})")
    resize.set_defaults(func=_resize)

    query = sub.add_parser("query", help="look up a key's state in a running job")
    query.add_argument("url", help="the job's control endpoint")
    query.add_argument("uid", help="the operator's uid (`.uid(...)` in the job)")
    query.add_argument("key", help='the key, as JSON when it parses (42, "w1", [1, "a"] for a tuple), else the text')
    query.add_argument("--live", action="store_true",
                       help="the value now, from the subtask that owns the key (default: as of the last checkpoint)")
    query.set_defaults(func=_query)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from .service import serve

    return serve(args)


def version() -> str:
    """The installed distribution's version (the package's own when it is not installed)."""
    try:
        return importlib.metadata.version("epochal")
    except importlib.metadata.PackageNotFoundError:
        from .. import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    job_args: list[str] = []
    if "--" in argv:  # everything after `--` belongs to the job file
        cut = argv.index("--")
        argv, job_args = argv[:cut], argv[cut + 1 :]
    if argv[:2] == ["savepoint", "rescale-groups"]:
        argv = [RESCALE_GROUPS, *argv[2:]]
    args = parser.parse_args(argv)
    args.job_args = job_args
    try:
        return int(args.func(args))
    except EpochalError as exc:
        print(f"epochal: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if args.func is _run:
            raise  # the job file's own error: its traceback is what its author needs
        print(f"epochal: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
