"""Shared fixtures: the tests directory on sys.path, and one local Spark session per run."""

from __future__ import annotations

import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


@pytest.fixture(scope="session")
def spark():
    """A local[2] SparkSession, started once: Spark start-up costs ~15 s on 2 cores."""
    from pyspark import cloudpickle

    import spark_jobs
    from epochal.cluster.spark import create_session

    # Spark workers cannot import modules from tests/: ship the job code by value.
    cloudpickle.register_pickle_by_value(spark_jobs)
    session = create_session("local[2]")
    yield session
    session.stop()
