"""`GET /metrics` through Prometheus's own parser, and `GET /metrics.json`: the numbers equal what
the test sent and what the checkpoint manifests say, for a finished job and a running one."""

from __future__ import annotations

from pathlib import Path

import pytest
from metrics_jobs import Paced, bounded_env, get, metrics_json, scrape, slow_finite, total, wait_for, word_count
from prometheus_client import REGISTRY

from epochal import CheckpointConfig, JobCancelledError, StreamEnvironment
from epochal.cluster.endpoint import ControlEndpoint
from epochal.cluster.inprocess import InProcessExecutor
from epochal.runtime.master.control import JobControl
from epochal.state.storage import CheckpointStorage


def test_a_finished_jobs_metrics_match_the_records_sent_and_the_manifests(tmp_path: Path) -> None:
    n, directory = 4_000, str(tmp_path / "chk")
    env = bounded_env(directory)
    word_count(env, slow_finite(n))
    job = env.job_graph("counted")
    control = JobControl(job.name, 2)
    endpoint = ControlEndpoint(control)  # the endpoint outlives the job here: read its last snapshot
    try:
        InProcessExecutor().execute(job, None, control)
        samples = scrape(endpoint.url)
        code, content_type, _ = get(endpoint.url + "/metrics")
        as_json = metrics_json(endpoint.url)
    finally:
        endpoint.close()
    assert code == 200 and content_type.startswith("text/plain")
    assert total(samples, "epochal_records_out_total", job="counted", operator="numbers") == n
    assert total(samples, "epochal_records_in_total", job="counted", operator="out") == n
    assert total(samples, "epochal_records_in_total", operator="count") == n
    assert {ls["subtask"] for ls, _ in samples["epochal_records_in_total"]} == {"0", "1"}
    storage = CheckpointStorage(directory, create=False)
    complete = storage.complete_checkpoints()
    assert total(samples, "epochal_checkpoints_total", status="completed") == len(complete) >= 2
    assert total(samples, "epochal_checkpoints_total", status="aborted") == 0
    last = storage.load_manifest(max(complete))
    assert total(samples, "epochal_last_checkpoint_id") == last.checkpoint_id
    assert total(samples, "epochal_checkpoint_size_bytes", kind="full") == last.full_size()
    assert total(samples, "epochal_checkpoint_size_bytes", kind="delta") == last.written_size()
    assert total(samples, "epochal_checkpoint_duration_seconds") == pytest.approx(last.duration_ms / 1000)
    count_state = sum(h.size for st in last.operator("count").subtasks  # type: ignore[union-attr]
                      for h in (*st.keyed_chain(), st.operator) if h is not None)
    assert total(samples, "epochal_state_size_bytes", operator="count") == count_state
    assert total(samples, "epochal_job_state", state="finished") == 1
    assert total(samples, "epochal_job_state", state="running") == 0
    assert total(samples, "epochal_restarts_total") == 0
    assert samples["epochal_task_busy_seconds_total"] and samples["epochal_task_busy_ratio"]
    assert as_json["records_in"] == as_json["records_out"] == n
    assert as_json["checkpoints_completed"] == len(complete)
    assert [c["checkpoint_id"] for c in as_json["checkpoints"]] == sorted(complete)


def test_a_running_job_is_scraped_live_and_counts_reach_what_was_sent(tmp_path: Path) -> None:
    n = 5_000
    env = StreamEnvironment(2, executor="inprocess", web_port=0,
                            checkpoint=CheckpointConfig(interval=0.1, directory=str(tmp_path / "chk")))
    word_count(env, Paced(n, per_read=200))
    handle = env.execute_async("live")
    assert handle.web_url is not None
    url = handle.web_url
    try:
        def caught_up() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            s = scrape(url)
            done = total(s, "epochal_records_in_total", operator="out") == n
            return s if done and total(s, "epochal_checkpoints_total", status="completed") >= 2 else None

        samples = wait_for(caught_up, what="every record at the sink and two checkpoints")
        assert total(samples, "epochal_records_out_total", operator="numbers") == n
        assert total(samples, "epochal_job_state", state="running") == 1
        assert total(samples, "epochal_job_attempt") == 1
        live = metrics_json(url)
        assert live["operators"][0]["name"] == "numbers" and live["records_in"] == n
        assert {(e["source"], e["target"], e["kind"]) for e in live["edges"]} == {
            ("numbers", "pair", "chain"), ("pair", "count", "key_group"), ("count", "out", "chain")}
    finally:
        handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.result(timeout=60)


def test_each_endpoint_has_its_own_registry() -> None:
    a, b = ControlEndpoint(JobControl("a", 1)), ControlEndpoint(JobControl("b", 1))
    try:
        assert total(scrape(a.url), "epochal_job_state", job="a", state="created") == 1
        assert not any(ls.get("job") == "a" for ls, _ in scrape(b.url)["epochal_job_state"])
        assert REGISTRY.get_sample_value("epochal_job_parallelism", {"job": "a"}) is None
    finally:
        a.close()
        b.close()
