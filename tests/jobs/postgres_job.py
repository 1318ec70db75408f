"""A job file for `epochal run` tests: a table's changes into two tables; the database and the
checkpoint directory come from the environment."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from postgres_jobs import cdc_env  # noqa: E402

env = cdc_env(os.environ["EPOCHAL_TEST_DSN"], os.environ["EPOCHAL_TEST_CKPT"])
if __name__ == "__main__":
    from pyspark import cloudpickle

    import postgres_jobs

    cloudpickle.register_pickle_by_value(postgres_jobs)
    env.execute("postgres-job")
