"""The window operator's columnar mode: one table for the subtask, in keyed state per key group.

Used when every query is periodic (`Tumbling`, `Sliding`: a `SliceTable`) or every query is a
`Session` (a `SessionTable`), the function is a count, sum, min or max of a value column (or a
count), the key is a column and the event time a field, and the operator's first input is an
Arrow batch with a numeric value column (`table_reduction`, `TableWindows.accepts`). Then a
batch is added in one vectorized pass and a watermark fires every due window of every key in one
pass (`runtime.windowing.table`, `runtime.windowing.session_table`), instead of a store and a
timer per key. Record lists that come later are turned into the same columns, so results do not
depend on batching.

State: the table is the subtask's working state, and keyed state is its state of record. Before
a snapshot fixes the state (ABS, Algorithm 1: the state after the records before the barrier)
the table writes one entry per key group (`GroupSlices` into `__window_table__`, `GroupSessions`
into `__window_sessions__`), keyed by the key group's number, and deletes the entries of key
groups it no longer holds; a restore (after a failure, or a rescale: any superset of key groups)
loads the entries of the key groups the subtask owns. A live state query of a key reads the
table (`key_store`: the `SliceStore` the per-key path would hold). When key groups move between
running subtasks (live migration), the operator flushes the table, the backend drops and gains
key groups, and `reload` rebuilds the table from keyed state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...plan.specs import KeyedWindowSpec, WindowFunctionKind
from ...plan.triggers import WindowTime
from ...plan.windows import DeterministicWindow, Session
from ...state.contract import KeyedStateBackend
from ...state.keygroups import owned_key_group
from ..windowing.aggregates import Values
from ..windowing.columnar import python_list
from ..windowing.engine import Windowing
from ..windowing.session_state import SESSIONS_STATE
from ..windowing.session_table import SessionTable
from ..windowing.table import SliceTable, TableAdmission
from ..windowing.table_firing import FiredColumns
from ..windowing.table_partials import Reduction, value_dtype
from ..windowing.table_state import TABLE_STATE

_NAME_ROWS = 1 << 18  # window names kept repeated for runs of up to this many rows (all queries together)
_REDUCTIONS = {WindowFunctionKind.COUNT: Reduction.COUNT, WindowFunctionKind.SUM: Reduction.SUM,
               WindowFunctionKind.MIN: Reduction.MIN, WindowFunctionKind.MAX: Reduction.MAX}


def table_reduction(spec: KeyedWindowSpec) -> Reduction | None:
    """What a slice table would compute for this operator, or None if the operator needs the
    per-key stores (sessions, user-defined windows, other functions, keys or times by function)."""
    reduction = _REDUCTIONS.get(spec.kind)
    if reduction is None or not isinstance(spec.key, str) or spec.event_time is None or spec.event_time.fn is not None:
        return None
    if spec.trigger is not None or spec.time is not WindowTime.EVENT:
        return None
    sessions = sum(isinstance(q, Session) for _, q in spec.queries)
    if sessions not in (0, len(spec.queries)) or any(isinstance(q, DeterministicWindow) for _, q in spec.queries):
        return None  # one kind of table: all periodic or all sessions
    if not (spec.value is None or isinstance(spec.value, str)):
        return None
    if reduction is not Reduction.COUNT and spec.value is None:
        return None
    return reduction


def numeric_column(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An Arrow value column as numpy; a missing value is an error (as on the per-key path)."""
    if values.null_count:
        raise ValueError(f"missing value in row {values.to_pylist().index(None)}")
    return np.asarray(values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array)
                      else values.combine_chunks().to_numpy(zero_copy_only=False))


_ARROW_TYPES = {np.dtype(np.float64): pa.float64(), np.dtype(np.int64): pa.int64()}


def _column(values: np.ndarray) -> pa.Array:
    """A numpy column as Arrow without a copy: the usual float64 and int64 columns wrap their
    buffer directly (`pa.array` would look for pandas types first, at every firing)."""
    kind = _ARROW_TYPES.get(values.dtype)
    if kind is None or not values.flags.c_contiguous:
        return pa.array(values)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


class TableWindows:
    """The slice or session table of one window operator subtask and its place in keyed state."""

    def __init__(self, windowing: Windowing, reduction: Reduction, backend: KeyedStateBackend) -> None:
        self.table: SliceTable | SessionTable
        if windowing.sessions is not None:
            assert windowing.grid is None and windowing.cutty is None
            self.table, self.state, names = SessionTable(windowing.sessions, reduction), SESSIONS_STATE, \
                windowing.sessions.names
        else:
            assert windowing.grid is not None
            self.table, self.state, names = SliceTable(windowing.grid, reduction), TABLE_STATE, windowing.grid.names
        self.reduction = reduction
        self.backend = backend
        self.written: set[int] = set()  # key groups with an entry in keyed state
        self.names: pa.Array = pa.array(list(names), pa.string())
        self.repeated: dict[int, pa.Array] = {}  # a query's name, repeated: a run of results slices it

    @staticmethod
    def accepts(reduction: Reduction, values: pa.Array | pa.ChunkedArray | None) -> bool:
        """Whether a first Arrow batch with this value column suits a table (numbers, not bools)."""
        if reduction is Reduction.COUNT:
            return True
        if values is None:
            return False
        kind = values.type
        return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))

    def group_of(self, key: Any) -> int:
        backend = self.backend
        return owned_key_group(key, None, backend.key_groups, backend.max_parallelism)

    # -- records --------------------------------------------------------------------------------

    def add_arrow(self, keys: pa.Array | pa.ChunkedArray, times: np.ndarray, values: pa.Array | None,
                  watermark: float, weights: np.ndarray | None = None) -> TableAdmission:
        """Add a batch's rows (`weights`: the records each row of a local phase's partials stands for)."""
        column = None if values is None or self.reduction is Reduction.COUNT else numeric_column(values)
        return self.table.add(keys, times, column, watermark, self.group_of, weights)

    def add_records(self, keys: list[Any], times: np.ndarray, values: Values, watermark: float) -> TableAdmission:
        column = None
        if values is not None and self.reduction is not Reduction.COUNT:
            column = np.asarray(python_list(values, len(keys)))
            if value_dtype(column) is None or column.dtype.kind == "b":
                bad = next((v for v in python_list(values, len(keys))
                            if isinstance(v, bool) or not isinstance(v, (int, float))), column.dtype)
                raise TypeError(f"{self.reduction.value} needs numbers, got {bad!r}")
        return self.table.add(keys, times, column, watermark, self.group_of)

    def fire(self, watermark: float) -> FiredColumns | None:
        fired = self.table.fire(watermark)
        return fired if fired is not None and len(fired) else None

    # -- output ---------------------------------------------------------------------------------

    def arrow(self, fired: FiredColumns, key: str, named: bool, result: str) -> pa.RecordBatch:
        """The results as the columnar path emits them."""
        keys = fired.keys if isinstance(fired.keys, pa.Array) else pa.array(fired.keys)
        if named:
            window = self._window_names(fired)
        columns = [keys, *([window] if named else []),
                   _column(fired.start), _column(fired.end), _column(fired.result)]
        names = [key, *(["window"] if named else []), "window_start", "window_end", result]
        return pa.RecordBatch.from_arrays(columns, names=names)

    def _window_names(self, fired: FiredColumns) -> pa.Array:
        """The `window` column: slices of each query's name repeated (kept for the next firing)
        when every window holds every key, else a gather from the names."""
        rows, names = len(fired), len(self.names)
        if names == 1:
            return self._repeated(0, rows)
        runs = fired.windows
        if runs is None or not len(runs) or names * (rows // len(runs)) > _NAME_ROWS:
            return self.names.take(pa.array(fired.query))
        per = rows // len(runs)
        parts = [self._repeated(q, per) for q in runs.tolist()]
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    def _repeated(self, query: int, rows: int) -> pa.Array:
        if rows > _NAME_ROWS:
            return pa.repeat(self.names[query], rows)
        found = self.repeated.get(query)
        if found is None or len(found) < rows:
            found = self.repeated[query] = pa.repeat(self.names[query], min(_NAME_ROWS, 2 * rows))
        return found.slice(0, rows)

    def tuples(self, fired: FiredColumns, named: bool) -> list[tuple[Any, ...]]:
        """The results as the per-record path emits them."""
        keys, start, end, result = fired.key_list(), fired.start.tolist(), fired.end.tolist(), fired.result.tolist()
        if named:
            names = self.names.to_pylist()
            return list(zip(keys, [names[q] for q in fired.query.tolist()], start, end, result))
        return list(zip(keys, start, end, result))

    # -- keyed state ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the table into keyed state, one entry per key group (before a snapshot)."""
        backend, state = self.backend, self.state
        entries = self.table.export()
        for group in sorted(self.written - entries.keys()):
            backend.set_current_key(group, group)
            backend.delete(state)
        for group, entry in entries.items():
            backend.set_current_key(group, group)
            backend.put(state, entry)
        self.written = set(entries)

    def reload(self) -> bool:
        """Rebuild the table from keyed state (after a restore, or a change of key groups);
        whether keyed state held any table entry."""
        backend, state = self.backend, self.state
        entries: list[tuple[int, Any]] = []
        for group, key in list(backend.keys(state)):
            backend.set_current_key(key, group)
            entries.append((group, backend.get(state)))
        self.table.clear()
        self.table.load(entries)
        self.written = {g for g, _ in entries}
        return bool(entries)

    def query(self, key: Any) -> Any:
        """The key's window state as its `SliceStore` would hold it (None: no windows)."""
        return self.table.key_store(key)
