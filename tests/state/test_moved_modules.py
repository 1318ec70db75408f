"""Operator state pickled before a runtime module moved still restores (`state.moved_modules`)."""

import pickle

import pytest

from epochal.errors import CorruptCheckpointError
from epochal.runtime.channel_state import InFlight
from epochal.runtime.wire.elements import Watermark
from epochal.state.snapshot_files import decode_operator_state, encode_operator_state


def _as_written_before(state: object, old: dict[str, str]) -> bytes:
    """`state` pickled as if its types lived at their old paths (protocol 2 names a class by the
    GLOBAL opcode, "module\\nname\\n" as text, so the paths can be swapped in place)."""
    data = pickle.dumps(state, protocol=2)
    for new, before in old.items():
        data = data.replace(new.encode() + b"\n", before.encode() + b"\n")
    return data


def test_an_in_flight_log_written_before_the_wings_restores():
    state = InFlight(((0, Watermark(12.0)),))
    assert decode_operator_state(encode_operator_state(state)) == state
    old = _as_written_before(state, {"epochal.runtime.channel_state": "epochal.runtime.in_flight",
                                    "epochal.runtime.wire.elements": "epochal.runtime.elements"})
    assert b"epochal.runtime.in_flight" in old and b"epochal.runtime.elements" in old
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)  # what a plain load does
    assert decode_operator_state(old) == state


def test_a_late_record_logged_before_the_window_operator_split_restores():
    from epochal.runtime.operators.window_output import LateRecord

    state = InFlight(((1, LateRecord("r", ("q",))),))
    old = _as_written_before(state, {"epochal.runtime.operators.window_output": "epochal.runtime.operators.windows",
                                     "epochal.runtime.channel_state": "epochal.runtime.in_flight"})
    assert b"epochal.runtime.operators.windows\nLateRecord" in old
    assert decode_operator_state(old) == state


def test_garbage_is_still_refused():
    with pytest.raises(CorruptCheckpointError):
        decode_operator_state(b"\x80\x05garbage")
