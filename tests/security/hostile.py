"""What a hostile peer sends, shared by the handshake's tests and the suite against a running job.

`EVIL_PICKLE` is a pickle that, if anything unpickled it, would create the file `marker` (via
`os.open`-free `pathlib.Path.touch`): a test asserts the file never appears. `frames()` is a
Hypothesis strategy of byte strings that look more or less like Epochal's frames: raw garbage,
headers with every kind and any length (oversized ones too), truncated frames, valid frames
without a handshake, and the first bytes of a handshake followed by garbage.
"""

from __future__ import annotations

import pathlib
import pickle
import socket
import struct
import time
from typing import Any

from hypothesis import strategies as st

from epochal.runtime.wire.handshake import HELLO_BYTES, MAGIC, ROLE_BYTES, Role
from epochal.runtime.wire.network import BACKUP, CONTROL, CREDIT, DATA_ARROW, DATA_PICKLE, EVENT, HELLO, encode_frame

HEADER = struct.Struct("<BIIQ")
KINDS = (DATA_PICKLE, DATA_ARROW, EVENT, CREDIT, CONTROL, HELLO, BACKUP)


class _Touch:
    """Unpickles as a call of `Path.touch` on its path."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def evil_pickle(marker: str) -> bytes:
    """A pickle whose loading creates `marker`."""
    return pickle.dumps(_Touch(marker), protocol=5)


def evil_frames(marker: str) -> list[bytes]:
    """Every frame kind carrying the evil pickle, without a handshake; and after a handshake's
    first message (a HELLO of the right shape, a made-up nonce), the frame again."""
    payload = evil_pickle(marker)
    frames = [encode_frame(kind, 0, 0, payload) for kind in KINDS]
    hello = MAGIC + Role.WORKER.wire + bytes(32)
    frames += [hello + bytes(32) + frame for frame in frames]  # a proof of zeros, then the frame
    frames.append(payload)  # the bare pickle
    return frames


def frames(marker: str) -> st.SearchStrategy[bytes]:
    """Hostile byte strings (see the module's docstring)."""
    payload = st.one_of(st.binary(max_size=512), st.just(evil_pickle(marker)))
    header = st.builds(
        lambda kind, attempt, channel, length: HEADER.pack(kind, attempt, channel, length),
        st.one_of(st.sampled_from(KINDS), st.integers(0, 255)),
        st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
        st.one_of(st.integers(0, 4096), st.integers(2**30, 2**64 - 1)),  # oversized prefixes too
    )
    frame = st.builds(lambda h, p: h + p, header, payload)
    truncated = st.builds(lambda f, cut: f[: max(0, len(f) - cut)], frame, st.integers(1, 64))
    handshake_then = st.builds(
        lambda role, nonce, rest: MAGIC + role.ljust(ROLE_BYTES, b"\0")[:ROLE_BYTES] + nonce + rest,
        st.one_of(st.just(Role.WORKER.value), st.just(Role.JOB_MASTER.value), st.binary(max_size=16)),
        st.binary(min_size=32, max_size=32), st.binary(max_size=256),
    )
    return st.one_of(st.binary(max_size=2048), frame, truncated, handshake_then,
                     st.builds(lambda f, n: f * n, frame, st.integers(2, 4)),
                     st.just(MAGIC[: HELLO_BYTES // 8]))


def send(address: tuple[str, int], data: bytes, linger: float = 0.05) -> bytes:
    """Connect, send `data`, wait a moment for an answer, close; what came back (b"" if closed)."""
    answer = b""
    try:
        with socket.create_connection(address, timeout=2) as sock:
            sock.sendall(data)
            sock.settimeout(linger)
            deadline = time.monotonic() + linger
            while time.monotonic() < deadline:
                try:
                    chunk = sock.recv(4096)
                except (TimeoutError, OSError):
                    break
                if not chunk:
                    break
                answer += chunk
    except OSError:
        pass  # refused or reset: what a closed door does
    return answer
