"""Window aggregation on shared slices (dissertation ch. 5, Cutty), pure and state-agnostic.

`Windowing` runs an operator's window queries over one `SliceStore` per key: periodic queries
share slices cut at the union of their boundaries (`grid`, `edges`), sessions merge slices
(`sessions`), user-defined deterministic windows run Cutty's shared aggregator (`cutty`); records
come one at a time (`Windowing.add`) or as Arrow batches (`Windowing.add_columns`, `columnar`).
No I/O, no clock, no keyed-state API: the stores are plain values the runtime keeps as keyed state.
The columnar path's `table.SliceTable` keeps every key's slices of periodic queries in one set of
matrices instead: its rows (`table_slots`), partials (`table_partials`, `table_lookup`, `prefix`),
firing (`table_firing`, `calendar`, `query_index`) and keyed-state form (`table_state`).
"""

from .aggregates import Aggregate, Combining, Count, Max, Min, Process, Reduce, Sum, WindowAggregate
from .columnar import ColumnarAdmission
from .engine import Windowing
from .store import Admission, FiredWindow, FireFirst, Firing, SliceStore

__all__ = [
    "Admission",
    "Aggregate",
    "ColumnarAdmission",
    "Combining",
    "Count",
    "FireFirst",
    "FiredWindow",
    "Firing",
    "Max",
    "Min",
    "Process",
    "Reduce",
    "SliceStore",
    "Sum",
    "WindowAggregate",
    "Windowing",
]
