"""TextFileSource's reader: every line once, across splits, batch limits and resumed positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal.connectors import TextFileSource
from epochal.errors import EpochalError

_LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40)


def _expected(text: str) -> list[str]:
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _read(source: TextFileSource, max_records: int, resume_every: int = 0) -> list[str]:
    """Every line of every split; with `resume_every`, a fresh reader from the position every
    that many batches (as after a restore)."""
    out: list[str] = []
    for split in source.splits():
        reader: Any = source.open_split(split, None)
        batches = 0
        while (batch := reader.read(max_records)) is not None:
            assert batch.num_rows <= max_records
            out.extend(batch.column("line").to_pylist())
            batches += 1
            if resume_every and batches % resume_every == 0:
                position = reader.position()
                reader.close()
                reader = source.open_split(split, position)
        reader.close()
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.tuples(_LINE, st.sampled_from(["\n", "\r\n"])), max_size=60),
    last_newline=st.booleans(),
    split_size=st.integers(1, 300),
    max_records=st.integers(1, 20),
    resume_every=st.integers(0, 3),
)
def test_every_line_once_whatever_the_splits_batches_and_restores(
    tmp_path: Path, lines: list[tuple[str, str]], last_newline: bool, split_size: int, max_records: int,
    resume_every: int,
) -> None:
    text = "".join(line + end for line, end in lines)
    if lines and not last_newline:
        text = text[: -len(lines[-1][1])]  # the last line without its newline
    path = tmp_path / "f.txt"
    path.write_bytes(text.encode("utf-8"))
    source = TextFileSource(str(path), split_size=split_size)
    assert _read(source, max_records, resume_every) == _expected(text)


def test_a_line_longer_than_the_read_block_comes_whole(tmp_path: Path) -> None:
    long = "x" * 3_000_000  # the reader decodes 1 MB blocks
    (tmp_path / "f.txt").write_text(f"a\n{long}\nb")
    assert _read(TextFileSource(str(tmp_path / "f.txt")), 1024) == ["a", long, "b"]


def test_other_encodings_are_decoded(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes("café\r\nnaïve\n".encode("latin-1"))
    assert _read(TextFileSource(str(tmp_path / "f.txt"), encoding="latin-1"), 10) == ["café", "naïve"]


def test_invalid_utf8_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(EpochalError, match=r"bad\.txt: not valid utf-8"):
        _read(TextFileSource(str(tmp_path / "bad.txt")), 10)
