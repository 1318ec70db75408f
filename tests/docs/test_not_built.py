"""Every "not built" in the documentation names something that is not in the code.

A page that says a feature is not built when it is misleads every reader (issue 33 found five).
Each such claim is registered here with what would exist once the feature is built: a module
or attribute of `epochal`, a file of the repository, a string of the source, or a probe that
runs the thing. The test fails when a page makes a claim nobody registered, when a registered
claim left its page, and when what a claim says is absent exists: then the page is wrong.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
_SAYS = re.compile(r"not (?:yet )?(?:built|implemented)|not supported yet", re.IGNORECASE)
_POINTER = re.compile(r"what is not built", re.IGNORECASE)  # a link to a list of claims, no claim itself


@dataclass(frozen=True)
class Claim:
    """A page's claim that something is not built, and what would exist if it were.

    `absent` entries: `epochal.a.b.Name` (a module or attribute), `path:REL` (a file of the
    repository), `text:WORDS` (words of the package's source), or a callable that returns True
    while the thing is absent."""

    page: str
    says: str  # words of the claim as the page has them (whitespace aside)
    absent: tuple[str | Callable[[], bool], ...]


CLAIMS = [
    Claim("docs/api.md", "Flink's `coGroup` (a window's records of both sides in one call) is not built",
          ("text:def co_group",)),
    Claim("docs/joins.md", "full (two-sided) outer joins, anti joins, and joins of more than two inputs",
          ("text:FULL = \"full\"", "text:ANTI = \"anti\"")),
    Claim("docs/index.md", "a job master inside the stage for Connect clients the executors cannot reach",
          ("epochal.cluster.stage_master",)),
    Claim("docs/operations.md", "A client the cluster cannot reach", ("epochal.cluster.stage_master",)),
    Claim("docs/concepts/elasticity.md", "Cheaper moves of large state", ("text:ingest_external_file",)),
    Claim("docs/concepts/elasticity.md", "Copies on local disk", ("epochal.config.StateConfig.backup_directory",)),
    Claim("docs/concepts/scale.md", "A buffer budget per task", ("epochal.config.JobConfig.buffer_budget",)),
    Claim("docs/concepts/scale.md", "Choosing a lower parallelism when a relaunch finds fewer slots",
          ("text:def shrink_to_slots",)),
    Claim("docs/concepts/scale.md", "A standby job master", ("epochal.runtime.master.standby",)),
    Claim("docs/concepts/scale.md", "Checkpoint directories spread over object-store prefixes",
          ("epochal.config.CheckpointConfig.prefixes",)),
    Claim("docs/concepts/loops.md", "A priority lane for barriers on the link is not built", ("text:priority lane",)),
]


def _normal(text: str) -> str:
    return " ".join(text.split())


def _claims_on(page: Path) -> list[tuple[int, str]]:
    """(line, text) of each claim on `page`: a paragraph or list item that says "not built", and
    every list item under a heading that does."""
    found: list[tuple[int, str]] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    under_heading, in_code = False, False
    block: list[str] = []
    start = 0

    def close() -> None:
        text = _normal(" ".join(block))
        if text and ((_SAYS.search(text) and not _POINTER.search(text)) or (under_heading and block_is_item)):
            found.append((start + 1, text))

    block_is_item = False
    for i, line in enumerate(lines + [""]):
        if line.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        heading = line.startswith("#")
        item = bool(re.match(r"\s*[-*] ", line))
        if not line.strip() or heading or item:
            close()
            block, block_is_item, start = ([line] if item else []), item, i
            if heading:
                under_heading = bool(_SAYS.search(line))
            continue
        block.append(line)
    return found


def _exists(name: str | Callable[[], bool]) -> bool:
    if callable(name):
        return not name()
    if name.startswith("path:"):
        return (REPO / name[5:]).exists()
    if name.startswith("text:"):
        words = name[5:]
        return any(words in p.read_text(encoding="utf-8") for p in (REPO / "src" / "epochal").rglob("*.py"))
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr) and attr not in getattr(obj, "__dataclass_fields__", {}):
                return False
            obj = getattr(obj, attr, None)
        return True
    return False


def test_every_not_built_claim_is_registered() -> None:
    unregistered = []
    for page in PAGES:
        rel = str(page.relative_to(REPO))
        for line, text in _claims_on(page):
            if not any(c.page == rel and _normal(c.says) in text for c in CLAIMS):
                unregistered.append(f"{rel}:{line}: {text[:120]}")
    assert unregistered == [], "claims of what is not built, with nothing registered to check them"


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"{c.page}:{c.says[:40]}")
def test_a_registered_claim_is_still_on_its_page_and_still_true(claim: Claim) -> None:
    text = _normal((REPO / claim.page).read_text(encoding="utf-8"))
    assert _normal(claim.says) in text, f"{claim.page} no longer says {claim.says!r}: drop the claim here"
    built = [a if isinstance(a, str) else a.__name__ for a in claim.absent if _exists(a)]
    assert built == [], f"{claim.page} says {claim.says!r} is not built, but the code has {built}"


def test_the_checker_finds_what_it_checks(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n\nSome text.\nThis thing is not built yet.\n\n## Not built yet\n\n- **A**: one\n  more\n"
                    "- **B**\n\n## Next\n\n- not a claim\n\nIt ends with what is not built yet.\n")
    assert [t for _, t in _claims_on(page)] == ["Some text. This thing is not built yet.", "- **A**: one more",
                                                 "- **B**"]
    assert _exists("epochal.config.StateConfig") and not _exists("epochal.config.StateConfig.no_such_field")
    assert _exists("path:README.md") and not _exists("path:no/such/file")
    assert _exists("text:class Task") and not _exists("text:no such words anywhere at all")
