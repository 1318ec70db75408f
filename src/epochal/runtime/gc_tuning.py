"""Python's garbage collector, set for a streaming worker while it hosts a job.

Why: the data path allocates and drops millions of small containers (record tuples, batch
lists). CPython runs a young-generation collection every 700 container allocations by default,
so a batch of 1,024 records is scanned while it is still alive and its records are promoted to
older generations, to be scanned again there. Checkpoints make it worse: state maps copied on
write after a snapshot count as long-lived growth and trigger full collections, which traverse
every tracked object of the process. Measured on the ABS benchmark's job (in-process, 2 shared
cores): the default thresholds cost about 13 % of the run time without checkpoints, and added
full collections with ABS at 1 s.

Records are acyclic: reference counting frees them; the cycle collector finds little. Raising
the thresholds keeps cyclic garbage around longer: a young cycle until 50,000 more allocations
by default, an old one until the next full collection, which comes after about 20 million
allocations instead of 70,000. The host restores the old settings when the job is
done: the in-process executor runs in the user's process, and Spark may reuse a Python worker.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_frozen = False  # whether a worker process froze its start-up objects (`tuned_gc(freeze=True)`)


@contextmanager
def tuned_gc(threshold: tuple[int, int, int] | None, *, freeze: bool = False) -> Iterator[None]:
    """Run the body with `gc.set_threshold(*threshold)`; `None` changes nothing.

    `freeze` (for a worker process that hosts nothing but the job) moves every object alive at
    the start, imported modules included, out of the collector's sight (`gc.freeze`), so full
    collections traverse only what the job allocated; `freeze_long_lived` may then add to them.
    """
    global _frozen
    if threshold is None:
        yield
        return
    previous = gc.get_threshold()
    gc.set_threshold(*threshold)
    if freeze:
        gc.freeze()
        _frozen = True
    try:
        yield
    finally:
        if freeze:
            _frozen = False
            gc.unfreeze()
        gc.set_threshold(*previous)


def freeze_long_lived() -> None:
    """In a worker process that froze its start-up objects, freeze every object alive now too:
    for a caller that just made many long-lived ones (state read for a key group that moves
    here), which the young generation would otherwise scan. In any other process (the
    in-process executor runs in the user's) nothing: freezing is the process's decision."""
    if _frozen:
        gc.freeze()
