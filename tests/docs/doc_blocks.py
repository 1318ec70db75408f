"""The ```python blocks of the documentation, and the output each page shows for them.

A block may be marked by an HTML comment on the line right before its fence (invisible once the
Markdown is rendered):

- `<!-- docs-test: skip (reason) -->`: never run; the test reports it as skipped with `reason`.
- `<!-- docs-test: spark -->`: needs a SparkSession called `spark`; runs only under the `spark`
  marker.
- `<!-- docs-test: commands -->` before a ```bash block (the README's command-line tour): its
  commands run, in order, in a shell (`command_blocks`); each must succeed.

The output a page *shows* for a block is what the block must print. A line that calls `print(`
shows its output in its trailing comment (`print(x)   # [1, 2]`) and in the comment lines that
follow it at the block's left margin (one per printed line, e.g. after a loop). A `print(` line
with neither shows its output in the ```text block that follows the Python block, if there is
one. Blocks that print something the page does not show are not checked.
"""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass
from enum import Enum

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(REPO, "docs")

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(spark|skip)\s*(?:\((.*)\))?\s*-->\s*$")
_COMMANDS = re.compile(r"^\s*<!--\s*docs-test:\s*commands\s*-->\s*$")
_TRAILING_COMMENT = re.compile(r"#\s?(.*)$")


class Mark(Enum):
    """How the docs test treats a block."""

    RUN = "run"
    SPARK = "spark"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Block:
    """One ```python block of a page."""

    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    code: str
    mark: Mark
    reason: str  # why a skipped block is skipped
    shown_output: tuple[str, ...] | None  # what the page says it prints; None: not shown

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[str]:
    """Every Markdown page of docs/, and README.md, relative to the repository root."""
    found = ["README.md"]
    for root, _dirs, files in os.walk(DOCS):
        found.extend(os.path.relpath(os.path.join(root, f), REPO) for f in files if f.endswith(".md"))
    return sorted(found)


def _fenced(lines: list[str]) -> list[tuple[int, int, str, list[str]]]:
    """(index of the opening fence, of the closing one, language, dedented body) of every
    fenced block."""
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        language = opening.group(2)
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = textwrap.dedent("\n".join(lines[i + 1 : j])).splitlines()
        blocks.append((i, j, language, body))
        i = j + 1
    return blocks


def _print_lines(code: list[str]) -> list[tuple[int, str | None]]:
    """(index, trailing comment) of each line of `code` that calls print."""
    found = []
    for k, line in enumerate(code):
        if "print(" not in line or line.lstrip().startswith("#"):
            continue
        comment = _TRAILING_COMMENT.search(line.split("print(", 1)[1])
        found.append((k, comment.group(1).rstrip() if comment else None))
    return found


def _shown_output(code: list[str], text_after: list[str] | None) -> tuple[str, ...] | None:
    expected: list[str] = []
    used_text = False
    prints = _print_lines(code)
    if not prints:
        return None
    for k, trailing in prints:
        shown = [trailing] if trailing else []
        for following in code[k + 1 :]:
            if not following.startswith("#"):
                break
            shown.append(following[1:].strip())
        if not shown and text_after is not None and not used_text:
            shown, used_text = list(text_after), True
        if not shown:
            return None  # a print whose output the page does not show: the block is not checked
        expected.extend(shown)
    return tuple(expected)


def blocks(page: str) -> list[Block]:
    """The ```python blocks of `page`, in order."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    fenced = _fenced(lines)
    found = []
    for n, (start, end, language, body) in enumerate(fenced):
        if language != "python":
            continue
        mark, reason = Mark.RUN, ""
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marked = _MARK.match(lines[before]) if before >= 0 else None
        if marked is not None:
            mark, reason = Mark(marked.group(1)), (marked.group(2) or "").strip()
            if mark is Mark.SKIP and not reason:
                raise ValueError(f"{page}:{start + 1}: a skipped block needs a reason: skip (why)")
        text_after = None
        if n + 1 < len(fenced):
            next_start, _next_end, next_language, next_body = fenced[n + 1]
            between = lines[end + 1 : next_start]
            if next_language == "text" and not any(s.strip() for s in between):
                text_after = next_body
        found.append(Block(page, start + 1, "\n".join(body) + "\n", mark, reason, _shown_output(body, text_after)))
    return found


@dataclass(frozen=True, slots=True)
class Commands:
    """A ```bash block marked `commands`: shell lines a reader types, run in order."""

    page: str
    line: int
    lines: tuple[str, ...]  # without their trailing comments

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def command_blocks(page: str) -> list[Commands]:
    """The ```bash blocks of `page` marked `<!-- docs-test: commands -->`."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = []
    for start, _end, language, body in _fenced(lines):
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if language == "bash" and before >= 0 and _COMMANDS.match(lines[before]):
            commands = tuple(line.split("  #", 1)[0].rstrip() for line in body if line.strip())
            found.append(Commands(page, start + 1, commands))
    return found
