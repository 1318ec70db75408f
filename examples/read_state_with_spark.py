"""Read a job's keyed state from Spark: the `epochal-state` data source.

A bounded word count runs (in-process, so the example needs no cluster) with its counting
operator named by a stable uid, `counts`, and ends with its final checkpoint. Spark then reads
that checkpoint's state as a DataFrame and queries it with SQL, and reads an older checkpoint by
id (time travel, as far back as retention keeps checkpoints).

    python examples/read_state_with_spark.py                  # from the repository root

Columns: key_group, key, state, value (key and value as JSON text), key_pickle, value_pickle
(the exact Python objects, pickled). Delete `ckpt-read-state/` to start over.
"""

import pickle
import shutil

from epochal import CheckpointConfig, StreamEnvironment
from epochal.testing import CollectSink, ListSource

CHECKPOINTS = "ckpt-read-state"
TEXT = "the quick brown fox jumps over the lazy dog the end".split() * 200


def run_job() -> None:
    env = StreamEnvironment(
        parallelism=2,
        executor="inprocess",
        checkpoint=CheckpointConfig(interval=0.01, directory=CHECKPOINTS, retain=5),
        state_backend="disk",  # or "memory": the checkpoint format is the same
    )
    words = env.from_source(ListSource(TEXT, splits=2, batch_size=50), name="words")
    words.key_by(lambda w: w).count().uid("counts").sink_to(CollectSink(), name="out")
    env.execute("read-state-example")


def main() -> None:
    shutil.rmtree(CHECKPOINTS, ignore_errors=True)
    run_job()

    import epochal.spark
    from epochal.cluster.spark import create_session

    spark = create_session("local[2]")
    try:
        epochal.spark.register(spark)
        df = spark.read.format("epochal-state").option("operator", "counts").load(CHECKPOINTS)
        df.createOrReplaceTempView("counts")
        top = spark.sql(
            "SELECT key AS word, value AS n "  # typed columns: a str key is a Spark string
            "FROM counts ORDER BY n DESC, word LIMIT 3"
        ).collect()
        exact = {pickle.loads(r.key_pickle): pickle.loads(r.value_pickle) for r in df.collect()}
        assert exact["the"] == TEXT.count("the")

        from epochal.state.storage import CheckpointStorage

        progress = {}  # time travel: how far the count had got at each retained checkpoint
        for checkpoint_id in CheckpointStorage(CHECKPOINTS).complete_checkpoints():
            at = (spark.read.format("epochal-state").option("operator", "counts")
                  .option("checkpoint", checkpoint_id).load(CHECKPOINTS))
            progress[checkpoint_id] = sum(pickle.loads(r.value_pickle) for r in at.collect())
        assert progress[max(progress)] == len(TEXT)
        print(
            f"read_state_with_spark: {len(exact)} keys, top {[(r.word, r.n) for r in top]}, "
            f"words counted at each checkpoint {progress}"
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
