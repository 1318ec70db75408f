"""`epochal run`'s progress: a panel redrawn in place on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from epochal.cli.progress import ProgressDisplay, format_duration, format_watermark, plain_line
from epochal.runtime.result import JobProgress

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _progress(**changes: object) -> JobProgress:
    base = dict(records_in=161_440, records_out=154_067, checkpoints_completed=4, last_checkpoint_ms=70.4,
                restarts=1, records_per_s=52_310.0, watermark_lag_s=2.1, watermark=1_764_000_003.0,
                last_checkpoint=12, job="clicks", state="running", web_url="http://127.0.0.1:41234")
    base.update(changes)
    return JobProgress(**base)  # type: ignore[arg-type]


def test_a_plain_line_per_report_off_a_terminal() -> None:
    out = io.StringIO()
    display = ProgressDisplay(out, terminal=False)
    display(_progress())
    display(_progress(watermark=None, watermark_lag_s=None, last_checkpoint_ms=None))
    display.close()
    assert out.getvalue().splitlines() == [
        "records in 161,440 (52,310/s)  out 154,067  watermark 2025-11-24 16:00:03 UTC (lag 2.1 s)  "
        "checkpoints 4 (last 70 ms)  restarts 1",
        "records in 161,440 (52,310/s)  out 154,067  checkpoints 4 (last -)  restarts 1",
    ]
    assert not _ANSI.search(out.getvalue())


def test_watermarks_on_a_job_s_own_clock_are_numbers() -> None:
    assert format_watermark(_progress(watermark=1234.5, watermark_lag_s=None)) == "1,234.500"
    assert plain_line(_progress(watermark=None)).count("watermark") == 0


def test_a_watermark_years_behind_the_clock_shows_its_date_and_a_lag_in_years() -> None:
    """Nexmark's generator starts in July 2015: a time of day alone, and a lag of 346,000,000 s,
    read as nonsense."""
    nexmark = _progress(watermark=1_436_918_430.0, watermark_lag_s=11.4 * 365.25 * 86_400)
    assert format_watermark(nexmark) == "2015-07-15 00:00:30 UTC (lag 11.4 years)"
    assert [format_duration(s) for s in (0.25, 2.1, 210, 15_000, 400_000)] == [
        "0.2 s", "2.1 s", "3.5 min", "4.2 h", "4.6 days"]


def test_the_last_line_of_a_job_that_ended_says_how_it_ended() -> None:
    assert plain_line(_progress()).endswith("restarts 1")  # running: as before
    assert plain_line(_progress(state="finished")).endswith("restarts 1  (finished)")
    assert plain_line(_progress(state="failed")).endswith("restarts 1  (failed)")


def test_the_terminal_panel_is_redrawn_in_place_and_its_last_frame_stays() -> None:
    out = io.StringIO()
    display = ProgressDisplay(out, terminal=True)
    display(_progress(records_in=1_000))
    display(_progress(records_in=2_000, state="restarting"))
    display.close()
    raw = out.getvalue()
    assert "\x1b[" in raw  # cursor movement: redrawn, not appended
    text = _ANSI.sub("", raw)
    last = text[text.rindex("job 'clicks'"):]
    for shown in ("restarting", "http://127.0.0.1:41234", "records in", "2,000", "52,310/s", "records out",
                  "154,067", "watermark", "2025-11-24 16:00:03 UTC (lag 2.1 s)", "checkpoints", "last #12 70 ms",
                  "restarts"):
        assert shown in last, shown


def test_epochal_run_on_a_terminal_shows_the_panel_with_the_dashboard_url(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        import time
        from epochal import StreamEnvironment, CheckpointConfig
        from epochal.testing import CollectSink, ListSource

        def slow(x):
            time.sleep(0.0005)
            return x

        env = StreamEnvironment(parallelism=1, checkpoint=CheckpointConfig(interval=0.2))
        env.from_source(ListSource(list(range(3000)))).map(slow).sink_to(CollectSink())
        if __name__ == "__main__":
            env.execute("on-a-tty")
    """))
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "epochal.cli.main", "run", str(job), "--executor", "inprocess"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower, cwd=tmp_path)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the other end closed: the job exited
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    assert proc.wait(timeout=30) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in screen
    text = _ANSI.sub("", screen)
    assert re.search(r"job 'on-a-tty'\s+(running|finished)\s+http://127\.0\.0\.1:\d+", text), text[-2000:]
    assert "records in" in text and "3,000" in text and "checkpoints" in text
