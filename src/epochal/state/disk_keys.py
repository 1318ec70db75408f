"""The layout of a key in the disk backend's RocksDB (`disk.py`), which its snapshots read too.

Layout of a database key: key group (2 bytes, big-endian, so a key group is one contiguous
range), the state name (length-prefixed), then the canonical bytes of the key (`encode_key`:
`1`, `1.0` and `True` are one key, as in a dict). The value is the pickled `(key, value)`, so
keys come back as the objects the user gave.
"""

from __future__ import annotations

import struct

_KG = struct.Struct(">H")
_NAME_LEN = struct.Struct(">H")


def group_prefix(key_group: int) -> bytes:
    """The prefix of every key of `key_group`: a key group is one contiguous range."""
    return _KG.pack(key_group)


def state_prefix(key_group: int, name: str) -> bytes:
    """The prefix of every key of the state `name` in `key_group`."""
    data = name.encode("utf-8")
    return _KG.pack(key_group) + _NAME_LEN.pack(len(data)) + data


def split_key(db_key: bytes) -> tuple[int, str]:
    """The key group and the state name of a database key."""
    (kg,) = _KG.unpack_from(db_key, 0)
    (n,) = _NAME_LEN.unpack_from(db_key, 2)
    return kg, db_key[4 : 4 + n].decode("utf-8")
