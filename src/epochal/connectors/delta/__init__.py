"""Delta Lake: a table written exactly once (`DeltaSink`), and read at a version or followed as
it grows (`DeltaSource`), both with the `deltalake` library (`pip install epochal[delta]`)."""

from .sink import STAGING_DIR as STAGING_DIR
from .sink import DeltaCommittable as DeltaCommittable  # checkpoints before the package pickled it here
from .sink import DeltaFile as DeltaFile
from .sink import DeltaSink as DeltaSink
from .sink import delta_stats as delta_stats
from .sink import newest_per_key as newest_per_key
from .source import DeltaSource as DeltaSource

__all__ = ["STAGING_DIR", "DeltaCommittable", "DeltaFile", "DeltaSink", "DeltaSource", "delta_stats", "newest_per_key"]
