"""A task's live logic patches: staged when the job master sends them, switched in at a barrier.

The protocol is in `runtime.patches`. Here, per task: a staged patch is loaded and checked (a
process function's `open()` runs on the operator's context: its state handles bind by name), and
the answer goes to the job master; the switch happens when the task fixes its state for a
barrier that carries the patch, after the snapshot (records before the barrier ran the old
function, records after it the new one); a restore applies the patches its checkpoint recorded
before the operators open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...plan.job_graph import TaskId
from ...plan.specs import OperatorSpec
from ...state.manifest import Manifest
from ...state.savepoints import storage_for
from ...state.storage import CheckpointStorage
from ..operators import RuntimeOperator
from ..operators.lifecycle import adopt_function
from ..patches import check_function, load_function, patch_attribute
from ..wire.messages import DropPatch, PatchStaged, StagePatch
from .chain import OperatorChain

log = logging.getLogger(__name__)


class TaskPatches:
    """The patches one task staged, and the switch to them.

    Args:
        chain: the task's operators.
        specs: the task's operator specs (what kind of function each runs).
        task: the task, named in its answers.
        send: to the job master.
    """

    def __init__(self, chain: OperatorChain, specs: tuple[OperatorSpec, ...], task: TaskId,
                 send: Callable[[Any], None]) -> None:
        self.chain = chain
        self.specs = {spec.uid: spec for spec in specs}
        self.task = task
        self.send = send
        self.staged: dict[int, tuple[RuntimeOperator, str, Any]] = {}

    def stage(self, message: StagePatch) -> None:
        """Load and check the patch; answer whether this subtask can run it."""
        operator, spec = self.chain.find(message.uid), self.specs.get(message.uid)
        try:
            if operator is None or spec is None:
                raise LookupError(f"no operator {message.uid!r} here")
            function = load_function(message.payload)
            check_function(spec, function)
            attribute = patch_attribute(spec)
            assert attribute is not None
            opener = getattr(function, "open", None) if attribute == "function" else None
            if opener is not None:
                opener(getattr(operator, "pctx"))  # noqa: B009 - a process operator's context, once open
        except Exception as exc:  # noqa: BLE001 - whatever it is, the patch is refused and said why
            log.warning("%s: patch %d refused: %s: %s", self.task, message.patch_id, type(exc).__name__, exc)
            self.send(PatchStaged(self.task, message.patch_id, f"{type(exc).__name__}: {exc}"))
            return
        self.staged[message.patch_id] = (operator, attribute, function)
        self.send(PatchStaged(self.task, message.patch_id))

    def drop(self, message: DropPatch) -> None:
        self.staged.pop(message.patch_id, None)

    def switch(self, patch_id: int) -> None:
        """A barrier carrying patch `patch_id` (and every one before) passes: switch to them."""
        for staged in sorted(p for p in self.staged if p <= patch_id):
            operator, attribute, function = self.staged.pop(staged)
            old = getattr(operator, attribute)
            setattr(operator, attribute, function)
            adopt_function(operator, old, function, opened=attribute == "function")
            log.info("%s: %s runs patch %d from this barrier on", self.task, operator.name, staged)

    def restore(self, manifest: Manifest, storage: CheckpointStorage | None) -> None:
        """Before the operators open: the functions the checkpoint's patches put in effect."""
        for record in manifest.patches:
            operator, spec = self.chain.find(record.uid), self.specs.get(record.uid)
            attribute = patch_attribute(spec) if spec is not None else None
            if operator is None or attribute is None:
                continue
            function = load_function(storage_for(manifest, storage).read_file(record.file))
            old = getattr(operator, attribute)
            setattr(operator, attribute, function)
            adopt_function(operator, old, function, opened=False)  # not open yet: `start` opens it
