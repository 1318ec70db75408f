"""`epochal history DIR`: the runs a checkpoint directory recorded, and one run in detail.

Every run of a job with a checkpoint directory keeps its history there
(`runtime.master.history`): status, checkpoints, restarts and their causes, final metrics.
This prints it after the job ended, when its endpoint and dashboard are gone; with
`--web-port N` it serves the dashboard on the recorded run (`cluster.history_endpoint`) until
interrupted; `--json` prints the record as it is stored.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from ..errors import EpochalError, NoCheckpointError
from ..runtime.master.history import RunRecord, read_history
from .interrupt import wait_for_interrupt
from .progress import format_duration


def history(args: argparse.Namespace) -> int:
    try:
        runs = read_history(args.directory)
    except (NoCheckpointError, OSError, ValueError) as exc:
        raise NoCheckpointError(f"no such checkpoint directory: {args.directory!r}") from exc
    if not runs:
        print(f"(no job history in {args.directory}: a job records its runs there from this version on)")
        return 0
    chosen = _chosen(runs, args.run)
    if args.json:
        print(json.dumps(_as_json(chosen), indent=2))
        return 0
    _table(runs)
    print()
    _details(chosen)
    if args.web_port is not None:
        _serve(chosen, args.web_port)
    return 0


def _chosen(runs: list[RunRecord], run: str | None) -> RunRecord:
    if run is None:
        return runs[-1]
    found = [r for r in runs if r.run == run or r.run.startswith(run)]
    if len(found) != 1:
        known = ", ".join(r.run for r in runs[-5:])
        raise EpochalError(f"no single run {run!r} in this history (the newest: {known})")
    return found[0]


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at).isoformat(sep=" ", timespec="seconds")


def _table(runs: list[RunRecord]) -> None:
    rows = [("run", "job", "state", "started", "took", "checkpoints", "restarts")]
    for r in runs:
        took = format_duration(r.seconds) if r.seconds is not None else f"(last recorded {_when(r.written_at)})"
        m = r.metrics or {}
        rows.append((r.run, r.job, r.state, _when(r.started_at), took, str(m.get("checkpoints_completed", 0)),
                     str(r.status.get("restarts", 0))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _details(r: RunRecord) -> None:
    print(f"run {r.run} of job {r.job!r}: {r.state}")
    if r.summary:
        print(f"  {r.summary}")
    elif r.ended_at is None:
        print(f"  recorded while it ran, last at {_when(r.written_at)}: it runs still, or its driver died")
    m = r.metrics or {}
    checkpoints = m.get("checkpoints") or []
    if checkpoints:
        print(f"  checkpoints ({m.get('checkpoints_completed', 0)} completed, {m.get('checkpoints_aborted', 0)} "
              f"aborted; the last {min(len(checkpoints), 10)}):")
        for c in checkpoints[-10:]:
            if c["status"] == "completed":
                took = f"{c['duration_s'] * 1000:,.0f} ms" if c.get("duration_s") is not None else "-"
                final = ", final" if c.get("is_final") else ""
                print(f"    {c['checkpoint_id']:>6}  completed  {_when(c['triggered_at'])}  {took}, "
                      f"{c['full_bytes']:,} bytes{final}")
            else:
                print(f"    {c['checkpoint_id']:>6}  aborted    {_when(c['triggered_at'])}  {c.get('reason', '')}")
    for failure in m.get("restarts") or []:
        where = f" (operator {failure['operator']!r}, record {failure['record']})" if failure.get("operator") else ""
        print(f"  attempt {failure['attempt']} failed at {_when(failure['at'])}: {failure['cause']}{where}")
    operators = list(r.operators) or m.get("operators") or []
    if operators:
        print("  operators (the whole job):" if r.operators else "  operators (the last attempt, as recorded):")
        width = max(len(o["name"]) for o in operators)
        for o in operators:
            extra = "".join(f", {o[k]:,} {k.split('_')[0]}" for k in ("late_records", "skipped_records") if o.get(k))
            print(f"    {o['name'].ljust(width)}  in {o['records_in']:,}, out {o['records_out']:,}{extra}")


def _as_json(r: RunRecord) -> dict[str, Any]:
    return {"run": r.run, "job": r.job, "state": r.state, "started_at": r.started_at, "ended_at": r.ended_at,
            "written_at": r.written_at, "summary": r.summary, "operators": list(r.operators), "status": r.status,
            "metrics": r.metrics}


def _serve(r: RunRecord, port: int) -> None:
    from ..cluster.history_endpoint import HistoryEndpoint

    endpoint = HistoryEndpoint(r, port=port)
    try:
        wait_for_interrupt(lambda: print(f"epochal: the dashboard of run {r.run} at {endpoint.url} (Ctrl-C ends)",
                                         file=sys.stderr, flush=True))
    finally:
        endpoint.close()
