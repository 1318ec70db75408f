"""Read the keyed state of an Epochal checkpoint from Spark, as a DataFrame.

    import epochal.spark
    epochal.spark.register(spark)
    df = (spark.read.format("epochal-state")
          .option("operator", "counts")          # the operator's uid
          .option("checkpoint", 42)              # optional: a given id; default the latest
          .load("ckpt/"))                        # a checkpoint directory, or a savepoint

The reader sees only complete checkpoints (their manifest exists and every file verifies), so it
reads committed state by construction, and an older id reads older state (time travel, back as
far as retention keeps checkpoints). One Spark partition reads one old subtask's key groups.

Columns:

| column         | type    | holds |
|----------------|---------|-------|
| `key_group`    | int     | the key group of the key |
| `key`          | typed   | the key, in the Spark type of the keys (`spark.types`), or their JSON if mixed |
| `state`        | string  | the state's name (`count`, `reduce`, or a name given in `open()`) |
| `value`        | typed   | the value, like `key` |
| `key_json`     | string  | the key as JSON (tuples become arrays; other objects their `repr`) |
| `value_json`   | string  | the value as JSON |
| `key_pickle`   | binary  | the key, pickled: `pickle.loads` gives back the exact object |
| `value_pickle` | binary  | the value, pickled |

Typed columns make the common cases plain SQL (`WHERE key = 'w1'`, `SUM(value)`), JSON keeps
mixed ones queryable (`get_json_object`), and the pickled columns keep everything exact for a
Python UDF. Internal state (names starting with `__`, e.g. timers) is included.
"""

from __future__ import annotations

from ._source import EpochalStateDataSource, register, to_json

__all__ = ["EpochalStateDataSource", "register", "to_json"]
