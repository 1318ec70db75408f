"""The chaos runner's short set (tests/chaos.py): one randomized trial of each fault kind on
local Spark, each committed output checked exactly: nothing lost, duplicated or unexpected;
and the fault points it arms inside Epochal (`epochal.runtime.fault_points`)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chaos
from epochal.runtime import fault_points

# restarts each kind causes at least: a kill during recovery (or during the restore) is a second one;
# a corrupt checkpoint costs none of its own: the job master verifies it before the restore and
# restores the one before (when it changed after that, the restoring task's failure is a second)
LEAST_RESTARTS = {"kill_twice": 2, "kill_in_restore": 2}


@pytest.fixture(scope="module")
def shipped() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(chaos)  # type: ignore[no-untyped-call]


@pytest.mark.spark
@pytest.mark.parametrize("fault", chaos.FAULTS)
def test_a_trial_of_each_fault_loses_duplicates_and_invents_nothing(
    spark: Any, tmp_path: Path, fault: str, shipped: None
) -> None:
    seed = int(os.environ.get("EPOCHAL_CHAOS_SEED", "0")) + chaos.FAULTS.index(fault)
    trial = chaos.run_trial(spark, 0, fault, random.Random(seed), str(tmp_path))
    assert (trial.lost, trial.duplicated, trial.unexpected) == (0, 0, 0), trial
    assert trial.fired, f"the fault did not happen: {trial}"
    assert trial.restarts >= LEAST_RESTARTS.get(fault, 1), trial


def _reach(point: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    code = f"from epochal.runtime.fault_points import fault_point; fault_point({point!r}); print('alive')"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)


def test_an_armed_fault_point_kills_the_first_process_that_reaches_it_and_no_other(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    env = {**os.environ, fault_points.ENV: f"sink.commit:{markers},restore.read:{markers}"}
    first = _reach("sink.commit", env)
    assert first.returncode == -signal.SIGKILL and first.stdout == b""
    assert (markers / "sink.commit").read_text().strip().isdigit()  # the pid that died there
    assert _reach("sink.commit", env).stdout == b"alive\n"  # the marker exists: fired already
    assert _reach("checkpoint.write", env).stdout == b"alive\n"  # not armed
    (markers / "sink.commit").unlink()  # deleting the marker arms the point again
    assert _reach("sink.commit", env).returncode == -signal.SIGKILL


def test_fault_points_are_disarmed_without_the_variable_and_refuse_a_malformed_one() -> None:
    env = {k: v for k, v in os.environ.items() if k != fault_points.ENV}
    assert _reach("sink.commit", env).stdout == b"alive\n"
    assert fault_points.parse(" a.b:/x , c:/y,") == {"a.b": "/x", "c": "/y"}
    with pytest.raises(ValueError, match="name:directory"):
        fault_points.parse("sink.commit")
