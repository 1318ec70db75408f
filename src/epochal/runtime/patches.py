"""Live logic patches: a new function for a running operator, switched in at one checkpoint barrier.

The dissertation (§4.5.5, dynamic reconfiguration) proposes carrying a logic change in the epoch
markers themselves: every task applies it at the instant it takes its part of the snapshot, and
alignment guarantees that no task sees a record of the new logic before the epoch completes. So
the committed output is the old function's up to that epoch and the new one's after it, and
the state is kept (only the function changes; state lives in the backend, by name). Epochal:

1. `JobHandle.patch(uid, function)` (or `epochal patch`, `POST /patch`) asks the job master;
   it checks what it can alone (the operator exists and runs a function of that kind);
2. every subtask of the operator *stages* the function: loads it (a function that does not
   unpickle there, say a module the workers lack, is refused) and, for a process function, runs
   its `open()`; one refusal refuses the patch everywhere, and the old function runs on;
3. the job master triggers a checkpoint whose barrier carries the patch (`Barrier.patch`); each
   subtask switches when it fixes its state for it, after its snapshot, so records before the
   barrier saw the old function and records after it the new one;
4. that checkpoint's manifest records the patch (`Manifest.patches`: the function pickled in a
   file of the checkpoint, like any state), and every later one does, so a restore from it or a
   later one (after a failure, a rescale, a savepoint) runs the new function. Should the
   checkpoint abort, some subtasks switched at its barrier: the attempt fails and restores the
   checkpoint before (the old function), as a move of key groups does, and the patch is refused.

What is patchable: the function of `map`, `filter`, `flat_map`, `map_batches`, `reduce` and
`process` (a `KeyedProcessFunction`: its state stays, by name). The graph does not change: no
operator is added or removed and no key selector changes (a new key would re-partition state).
"""

from __future__ import annotations

import pickle
from typing import Any

from ..plan.specs import KeyedProcessSpec, KeyedReduceSpec, MapBatchesSpec, OperatorSpec, RecordFnSpec

# the spec types whose function a patch replaces, and the attribute that holds it (the same on
# the spec and on the running operator)
PATCHABLE: dict[type, str] = {
    RecordFnSpec: "fn", MapBatchesSpec: "fn", KeyedReduceSpec: "fn", KeyedProcessSpec: "function",
}


def patch_attribute(spec: OperatorSpec) -> str | None:
    """The attribute of `spec` (and of its running operator) a patch replaces; None: not patchable."""
    return PATCHABLE.get(type(spec))


def check_function(spec: OperatorSpec, function: Any) -> None:
    """Raise if `function` cannot replace `spec`'s: the operator runs no user function, or one
    of another kind (a process function must have `process_element`; others must be callable).

    Raises:
        TypeError: naming the operator and what it needs.
    """
    attribute = patch_attribute(spec)
    if attribute is None:
        raise TypeError(f"operator {spec.name!r} ({type(spec).__name__}) runs no function a patch can replace; "
                        "patchable: map, filter, flat_map, map_batches, reduce, process")
    if attribute == "function":
        if not callable(getattr(function, "process_element", None)):
            raise TypeError(f"operator {spec.name!r} runs a KeyedProcessFunction: the patch must be one "
                            f"(with process_element), got {function!r}")
    elif not callable(function):
        raise TypeError(f"operator {spec.name!r} runs a function: the patch must be callable, got {function!r}")


def dump_function(function: Any) -> bytes:
    """The function as bytes every worker can load: by value where it was defined in a script,
    as Spark ships a UDF (cloudpickle)."""
    from pyspark import cloudpickle

    return bytes(cloudpickle.dumps(function))


def load_function(payload: bytes) -> Any:
    """The function back from `dump_function`'s bytes (raises what unpickling raises)."""
    return pickle.loads(payload)
