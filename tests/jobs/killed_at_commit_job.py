"""A job file for the corrupt-resume tests: the word count of `spark_jobs`, whose driver dies
(SIGKILL, in-process: the driver is this process) on the `KILL_AT_COMMIT`-th commit of its
sink, after that checkpoint's manifest was written and before any of its output was committed.
Paths come from the environment, as for `wordcount_job.py`."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from epochal.connectors import FileSink  # noqa: E402
from spark_jobs import wordcount_env  # noqa: E402

COMMITS = [0]


class KilledAtCommit(FileSink):
    def commit(self, committables):  # type: ignore[no-untyped-def]
        COMMITS[0] += 1
        if COMMITS[0] == int(os.environ.get("KILL_AT_COMMIT", "0")):
            os.kill(os.getpid(), signal.SIGKILL)
        super().commit(committables)


env = wordcount_env(os.environ["EPOCHAL_TEST_CORPUS"], os.environ["EPOCHAL_TEST_OUT"], os.environ["EPOCHAL_TEST_CKPT"],
                    executor="inprocess", sink=KilledAtCommit(os.environ["EPOCHAL_TEST_OUT"]))
if __name__ == "__main__":
    from pyspark import cloudpickle

    import spark_jobs

    cloudpickle.register_pickle_by_value(spark_jobs)
    result = env.execute("killed-at-commit")
    print(f"killed-at-commit: {result.operator('sink').records_in:,} updates committed")
