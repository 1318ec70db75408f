"""The dashboard in a real browser: headless Chromium (Debian's, driven by Playwright) loads the
page of a running job and the tests read its DOM: the job graph's nodes, checkpoint rows
appearing, a restart with its operator, and the state turning to cancelled after the Cancel
button (a wrong token refused first).

Set EPOCHAL_DASHBOARD_SCREENSHOT=docs/img/dashboard.png to refresh the docs' screenshot.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from metrics_jobs import wait_for

from epochal import CheckpointConfig, JobCancelledError, RestartStrategy, StreamEnvironment, WatermarkStrategy
from epochal.api.connector import Source, SplitReader
from epochal.testing import CollectSink
from epochal.windows import Tumbling

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need playwright (the test extra)")
CHROMIUM = os.environ.get("EPOCHAL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium (.ci/run installs Debian's)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


class _Split:
    split_id = "clicks"


class Clicks(Source):
    """Endless (user, time) clicks stamped as they are read, a few hundred at a time."""

    def splits(self) -> list[Any]:
        return [_Split()]

    def open_split(self, split: Any, position: Any | None) -> SplitReader:
        return _ClickReader(position or 0)


class _ClickReader(SplitReader):
    def __init__(self, position: int) -> None:
        self.next = position

    def read(self, max_records: int) -> list[tuple[int, float]]:
        time.sleep(0.001)
        now, start = time.time(), self.next
        self.next += 200
        return [(i % 17, now) for i in range(start, self.next)]

    def position(self) -> int:
        return self.next


class _FailOnce:
    """Fails on the 300th record of the first attempt only: one restart to show."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, click: tuple[int, float]) -> tuple[int, float]:
        self.seen += 1
        if self.seen == 300:
            raise ValueError("a click the parser did not expect")
        return click


def _slow(batch: list[Any]) -> list[Any]:
    time.sleep(0.002)  # a costly enrichment: its input fills, the source waits (backpressure)
    return batch


def _start(tmp_path: Path) -> Any:
    env = StreamEnvironment(
        2, executor="inprocess", web_port=0, batch_size=100, channel_capacity=2,
        checkpoint=CheckpointConfig(interval=0.4, directory=str(tmp_path / "chk")),
        restart=RestartStrategy(max_restarts=2),
    )
    (env.from_source(Clicks(), name="clicks",
                     watermarks=WatermarkStrategy.bounded_out_of_orderness(1.0, timestamp=1))
        .map(_FailOnce(), name="parse")
        .rebalance().map_batches(_slow, name="enrich")
        .key_by(lambda c: c[0]).window(Tumbling(1.0)).count(name="clicks_per_second")
        .sink_to(CollectSink(), name="dashboard_feed"))
    return env.execute_async("clickstream")


def _rows(page: Any, selector: str, attribute: str) -> list[str]:
    return [str(v) for v in page.eval_on_selector_all(selector, f"els => els.map(e => e.getAttribute('{attribute}'))")]


def test_the_dashboard_follows_a_running_job_and_cancels_it(browser: Any, tmp_path: Path) -> None:
    handle = _start(tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(handle.web_url)

        page.wait_for_selector("#graph .node[data-operator='dashboard_feed']", timeout=30_000)
        nodes = _rows(page, "#graph .node", "data-operator")
        assert {"clicks", "parse", "enrich", "clicks_per_second", "dashboard_feed"} <= set(nodes)
        assert page.text_content("#job") == "clickstream"
        assert page.locator("#graph path.edge").count() == len(nodes) - 1  # a pipeline: one link less
        assert page.locator("#graph path.edge[data-kind='rebalance']").count() == 1

        page.wait_for_selector("#checkpoints tbody tr[data-checkpoint]", timeout=30_000)
        first = max(int(c) for c in _rows(page, "#checkpoints tbody tr", "data-checkpoint"))
        wait_for(lambda: max(int(c) for c in _rows(page, "#checkpoints tbody tr", "data-checkpoint")) > first,
                 timeout=30, what="a newer checkpoint row")
        cells = page.locator("#checkpoints tbody tr").first.locator("td").all_text_contents()
        assert cells[1] == "completed" and cells[3].endswith("ms")

        page.wait_for_selector("#restart-table tbody tr[data-attempt='1']", timeout=30_000)
        restart = page.locator("#restart-table tbody tr").first.locator("td").all_text_contents()
        assert "ValueError" in restart[2] and restart[3] == "parse"
        wait_for(lambda: page.text_content("#attempt") == "2" and page.text_content("#state") == "running",
                 timeout=30, what="the second attempt running")
        page.wait_for_selector("#lag-chart polyline[data-series='largest lag']", timeout=30_000)
        page.wait_for_selector("#throughput-chart polyline", timeout=30_000)
        row = page.locator("#operators tbody tr[data-operator='clicks_per_second'] td").all_text_contents()
        assert row[2] not in ("0", "–") and row[9] != "–"  # records in, and a watermark

        screenshot = os.environ.get("EPOCHAL_DASHBOARD_SCREENSHOT")
        time.sleep(8 if screenshot else 0)  # more points on the charts for the docs
        page.screenshot(path=screenshot or str(tmp_path / "dashboard.png"), full_page=True)

        answers = ["3", handle.token]  # the rescale button asks for the parallelism, then the token
        page.on("dialog", lambda dialog: dialog.accept(answers.pop(0)) if answers else dialog.dismiss())
        page.click("#rescale")
        wait_for(lambda: "Rescaled from checkpoint" in (page.text_content("#action-result") or ""), timeout=60,
                 what="the rescale's answer")
        wait_for(lambda: page.text_content("#parallelism") == "3" and page.text_content("#state") == "running",
                 timeout=30, what="running at parallelism 3")
        assert handle.status().parallelism == 3
        answers.append("not-the-token")
        page.click("#cancel")
        wait_for(lambda: "Refused" in (page.text_content("#action-result") or ""), timeout=10, what="a refusal")
        assert handle.status().state.value == "running"

        answers.append(handle.token)
        page.click("#cancel")
        page.wait_for_selector("#state[data-state='cancelled']", timeout=30_000)
        assert page.is_disabled("#cancel")
        assert not errors, errors
    finally:
        handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)


def test_the_page_and_its_files_are_served_and_nothing_else(tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    from epochal.cluster.endpoint import ControlEndpoint
    from epochal.runtime.master.control import JobControl

    endpoint = ControlEndpoint(JobControl("static", 1))
    try:
        for path, kind in [("/", "text/html"), ("/dashboard/dashboard.js", "text/javascript"),
                           ("/dashboard/dashboard.css", "text/css")]:
            with urllib.request.urlopen(endpoint.url + path, timeout=5) as response:
                assert response.headers["Content-Type"].startswith(kind)
                assert response.read()
        for path in ("/dashboard/../endpoint.py", "/dashboard/%2e%2e/endpoint.py", "/dashboard/missing.js",
                     "/dashboard/", "/endpoint.py"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(endpoint.url + path, timeout=5)
            assert refused.value.code == 404, path
    finally:
        endpoint.close()


def test_the_dashboard_opened_on_a_finished_job_s_directory_shows_its_history(browser: Any, tmp_path: Path) -> None:
    """Issue 40: after the job, `epochal history DIR --web-port N` serves what its dashboard
    showed (recorded in the checkpoint directory), read-only."""
    import urllib.error
    import urllib.request

    from epochal.cluster.history_endpoint import HistoryEndpoint
    from epochal.runtime.master.history import read_history

    handle = _start(tmp_path)  # fails once (a restart to show), then runs until cancelled
    wait_for(lambda: handle.status().attempt == 2 and (handle.status().last_checkpoint or 0) >= 3, timeout=60,
             what="a restart and checkpoints")
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)

    (run,) = read_history(str(tmp_path / "chk"))
    endpoint = HistoryEndpoint(run)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(endpoint.url)
        page.wait_for_selector("#state[data-state='cancelled']", timeout=30_000)
        assert page.text_content("#job") == "clickstream"
        note = page.text_content("#history") or ""
        assert page.is_visible("#history") and f"The history of run {run.run}" in note and "was cancelled" in note
        assert {"clicks", "parse", "enrich", "clicks_per_second", "dashboard_feed"} <= set(
            _rows(page, "#graph .node", "data-operator"))
        page.wait_for_selector("#checkpoints tbody tr[data-checkpoint]", timeout=10_000)
        restart = page.locator("#restart-table tbody tr").first.locator("td").all_text_contents()
        assert "ValueError" in restart[2] and restart[3] == "parse"
        assert page.is_disabled("#cancel") and page.is_disabled("#rescale") and page.is_disabled("#savepoint")
        assert not errors, errors
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(endpoint.url + "/cancel", method="POST", data=b""),
                                   timeout=5)
        assert refused.value.code == 409
    finally:
        endpoint.close()
