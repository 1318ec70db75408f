"""A job file for `epochal run` tests: paths come from the environment."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import wordcount_env  # noqa: E402

env = wordcount_env(
    os.environ["EPOCHAL_TEST_CORPUS"],
    os.environ["EPOCHAL_TEST_OUT"],
    os.environ["EPOCHAL_TEST_CKPT"],
    slow=os.environ.get("EPOCHAL_TEST_SLOW", "1") == "1",
)
if __name__ == "__main__":
    from pyspark import cloudpickle

    import spark_jobs

    cloudpickle.register_pickle_by_value(spark_jobs)
    env.execute("wordcount-job")
