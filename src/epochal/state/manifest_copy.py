"""The second copy of each manifest, and the repair of a manifest from it.

`CheckpointStorage.write_manifest` writes `MANIFEST.copy.json` before `MANIFEST.json`, whose
rename stays the checkpoint's commit point: a complete checkpoint has both, an incomplete one
may have the copy alone and is still incomplete. When a manifest is found corrupt, the copy
beside it is read; if it is intact, the manifest is rewritten from it, and the read goes on as
if nothing had happened (logged). A single corrupt manifest then costs nothing: the checkpoint
is restored, not refused, and no committed epoch is replayed. Both corrupt: refused as before.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import CheckpointError, CorruptCheckpointError
from .manifest import Manifest

if TYPE_CHECKING:
    from .storage import CheckpointStorage

log = logging.getLogger(__name__)

MANIFEST_COPY_NAME = "MANIFEST.copy.json"
_MANIFEST_NAME = "MANIFEST.json"


def repair_manifest(storage: CheckpointStorage, relative: str, damage: CorruptCheckpointError) -> Manifest | None:
    """The manifest at `relative` from its copy, written back in its place; None if the copy is
    missing or corrupt too (or `relative` is no manifest of a pair)."""
    directory, name = posixpath.split(relative)
    if name != _MANIFEST_NAME:
        return None
    copy_path = posixpath.join(storage.root, directory, MANIFEST_COPY_NAME)
    try:
        with storage.fs.open_input_stream(copy_path) as f:
            data: bytes = f.read()
        manifest = Manifest.from_json(data, source=copy_path)
    except (OSError, CorruptCheckpointError) as exc:
        log.warning("%s and its copy are both unusable: %s; the copy: %s", relative, damage, exc)
        return None
    try:
        storage.write(relative, data)
    except CheckpointError as exc:  # read-only storage: the copy still serves this read
        log.warning("%s: could not rewrite it from its copy: %s", relative, exc)
    log.warning("%s was corrupt (%s); repaired from %s", relative, damage, MANIFEST_COPY_NAME)
    return replace(manifest, location=storage.uri)
