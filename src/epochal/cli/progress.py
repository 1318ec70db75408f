"""`epochal run`'s live progress: a small panel redrawn in place on a terminal, plain lines elsewhere.

On a terminal the panel is drawn by `rich` (its `Live` display redraws a renderable in place
and leaves the last frame on screen when the job ends); piped into a file or a CI log, each
report is one plain line, so a log stays greppable and never fills with escape codes.
"""

from __future__ import annotations

import datetime
import sys
from typing import IO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..runtime.result import JobProgress

# an event time this large is seconds since the epoch (a timestamp column, or one in seconds):
# shown as a UTC date and time, as the dashboard does; smaller ones are the job's own clock (a
# generator's, a test's), shown as numbers
_EPOCH_SECONDS = 1e9
_UNITS = ((120.0, 1.0, "s"), (7_200.0, 60.0, "min"), (172_800.0, 3_600.0, "h"), (63_072_000.0, 86_400.0, "days"))


def format_duration(seconds: float) -> str:
    """`2.1 s`, `3.5 min`, `4.2 h`, `3.1 days`, `11.4 years`: a lag read at a glance."""
    for below, unit, name in _UNITS:
        if abs(seconds) < below:
            return f"{seconds / unit:,.1f} {name}"
    return f"{seconds / 31_557_600:,.1f} years"


def format_watermark(p: JobProgress) -> str | None:
    """`2026-11-29 12:00:03 UTC (lag 2.1 s)`, or None for a job without event time."""
    if p.watermark is None:
        return None
    if p.watermark >= _EPOCH_SECONDS:
        mark = datetime.datetime.fromtimestamp(p.watermark, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    else:
        mark = f"{p.watermark:,.3f}"
    return mark if p.watermark_lag_s is None else f"{mark} (lag {format_duration(p.watermark_lag_s)})"


def plain_line(p: JobProgress) -> str:
    """One report as one line: `records in 161,440 (52,310/s)  out 154,067  checkpoints 4 ...`,
    and the state at the end when it is not `running` (the last line of a job that ended says so)."""
    last = f"{p.last_checkpoint_ms:.0f} ms" if p.last_checkpoint_ms is not None else "-"
    watermark = format_watermark(p)
    mark = f"  watermark {watermark}" if watermark is not None else ""
    state = "" if p.state == "running" else f"  ({p.state})"
    return (
        f"records in {p.records_in:,} ({p.records_per_s:,.0f}/s)  out {p.records_out:,}{mark}  "
        f"checkpoints {p.checkpoints_completed} (last {last})  restarts {p.restarts}{state}"
    )


def panel(p: JobProgress) -> Group:
    """One report as the terminal's panel."""
    title = Text.assemble(("job ", "dim"), (repr(p.job), "bold"), "  ", (p.state, _STATE_STYLE.get(p.state, "")))
    if p.web_url:
        title.append(f"  {p.web_url}", style="cyan underline")
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="dim")
    rows.add_column(justify="right")
    rows.add_column()
    rows.add_row("records in", f"{p.records_in:,}", f"{p.records_per_s:,.0f}/s")
    rows.add_row("records out", f"{p.records_out:,}", "")
    watermark = format_watermark(p)
    if watermark is not None:
        rows.add_row("watermark", watermark, "")
    last = "-" if p.last_checkpoint is None else f"#{p.last_checkpoint}"
    took = "" if p.last_checkpoint_ms is None else f"{p.last_checkpoint_ms:,.0f} ms"
    rows.add_row("checkpoints", f"{p.checkpoints_completed:,}", f"last {last} {took}".rstrip())
    rows.add_row("restarts", f"{p.restarts}", "")
    return Group(title, rows)


_STATE_STYLE = {"running": "green", "finished": "bold green", "restarting": "yellow", "failed": "red",
                "cancelled": "red"}


class ProgressDisplay:
    """The progress callback of `epochal run`: a `rich` panel on a terminal, else plain lines.

    Args:
        stream: where to write (stderr by default, so a job's own stdout stays its own).
        terminal: whether `stream` is a terminal; asked of the stream when None.
    """

    def __init__(self, stream: IO[str] | None = None, terminal: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self._live: Live | None = None

    def __call__(self, p: JobProgress) -> None:
        if not self.terminal:
            self.stream.write(plain_line(p) + "\n")
            self.stream.flush()
            return
        if self._live is None:
            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(panel(p), console=console, auto_refresh=False, transient=False)
            self._live.start()
        self._live.update(panel(p), refresh=True)

    def close(self) -> None:
        """Leave the last frame on screen (a job's end keeps its final numbers visible)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
