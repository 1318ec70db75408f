"""A job file for `epochal run` tests over a message log: the kind of log, its server and the
checkpoint directory come from the environment (see `spark_jobs.log_counts_env`)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import log_counts_env  # noqa: E402

env = log_counts_env(
    os.environ["EPOCHAL_TEST_LOG"], os.environ["EPOCHAL_TEST_URL"], os.environ["EPOCHAL_TEST_CKPT"], bounded=True,
)
if __name__ == "__main__":
    from pyspark import cloudpickle

    import spark_jobs

    cloudpickle.register_pickle_by_value(spark_jobs)
    env.execute("log-counts")
