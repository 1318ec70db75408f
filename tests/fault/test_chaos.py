"""The chaos runner's short set (tests/chaos.py): one randomized trial of each fault kind on
local Spark, each committed output checked exactly: nothing lost, duplicated or unexpected."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

import chaos

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def shipped() -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(chaos)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("fault", chaos.FAULTS)
def test_a_trial_of_each_fault_loses_duplicates_and_invents_nothing(
    spark: Any, tmp_path: Path, fault: str, shipped: None
) -> None:
    seed = int(os.environ.get("EPOCHAL_CHAOS_SEED", "0")) + chaos.FAULTS.index(fault)
    trial = chaos.run_trial(spark, 0, fault, random.Random(seed), str(tmp_path))
    assert (trial.lost, trial.duplicated, trial.unexpected) == (0, 0, 0), trial
    assert trial.restarts >= (2 if fault == "kill_twice" else 1), trial
