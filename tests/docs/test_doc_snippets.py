"""Every ```python block of the documentation runs, page by page, and prints what the page shows.

Each page's blocks run in order in one namespace, as a reader would paste them, in a fresh
working directory that holds what the README's quick start leaves behind: a `corpus/` of text
(written small here). Every job runs on the in-process executor (`epochal run --executor
inprocess` applies the same override), so the pages need no Spark; the few blocks that do are
marked in the Markdown (see `doc_blocks`).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from doc_blocks import REPO, Block, Commands, Mark, blocks, command_blocks, pages

from epochal.api.overrides import RunOverrides, run_overrides

ALL = [b for page in pages() for b in blocks(page)]
PAGES_THAT_RUN = sorted({b.page for b in ALL if b.mark is Mark.RUN})


@pytest.fixture
def workdir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh working directory with the quick start's `corpus/` (a small one)."""
    monkeypatch.chdir(tmp_path)
    os.makedirs("corpus")
    with open(os.path.join("corpus", "part-0.txt"), "w") as f:
        f.write("to be or not to be\nthat is the question\n")
    return str(tmp_path)


@contextlib.contextmanager
def _page_module(page: str) -> Iterator[dict[str, Any]]:
    """A namespace that is a real module, so that classes a page defines can be pickled."""
    name = "docs_page_" + "".join(c if c.isalnum() else "_" for c in page)
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        yield vars(module)
    finally:
        del sys.modules[name]


def _run(block: Block, namespace: dict[str, Any]) -> None:
    """Run one block; check its output against the page if the page shows it."""
    path = os.path.join(REPO, block.page)
    code = compile("\n" * block.line + block.code, path, "exec")  # tracebacks name page lines
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, namespace)
    if block.shown_output is not None:
        printed = [line.rstrip() for line in out.getvalue().splitlines()]
        assert printed == list(block.shown_output), f"{block.name} prints something else than the page shows"


def _run_page(page: str, until: Block | None = None, spark: Any = None) -> None:
    with _page_module(page) as namespace, run_overrides(RunOverrides(executor="inprocess")):
        for block in blocks(page):
            if block.mark is Mark.SPARK and until is not None:
                namespace["spark"] = spark
                _run(block, namespace)
            elif block.mark is Mark.RUN:
                _run(block, namespace)
            if block == until:
                return


@pytest.mark.parametrize("page", PAGES_THAT_RUN)
def test_page_runs_top_to_bottom(page: str, workdir: str) -> None:
    _run_page(page)


@pytest.mark.parametrize("block", [b for b in ALL if b.mark is Mark.SKIP], ids=lambda b: b.name)
def test_skipped_block(block: Block) -> None:
    pytest.skip(f"{block.name}: {block.reason}")


@pytest.mark.spark
@pytest.mark.parametrize("block", [b for b in ALL if b.mark is Mark.SPARK], ids=lambda b: b.name)
def test_spark_block(block: Block, workdir: str, spark: Any) -> None:
    """The page's blocks up to this one, this one with the session as `spark`."""
    _run_page(block.page, until=block, spark=spark)


def test_the_pages_have_blocks_and_few_are_skipped() -> None:
    assert len(ALL) >= 20, "the docs lost their examples, or the parser lost the blocks"
    skipped = [b.name for b in ALL if b.mark is Mark.SKIP]  # Spark's blocks run in the Spark lane
    assert len(skipped) <= 5, f"too many blocks are not run by any test: {skipped}"


COMMANDS = [c for page in pages() for c in command_blocks(page)]


def test_the_readme_has_its_command_line_tour() -> None:
    assert [c.page for c in COMMANDS] == ["README.md"] and len(COMMANDS[0].lines) >= 5


@pytest.mark.spark
@pytest.mark.parametrize("block", [c for c in COMMANDS if c.page != "README.md"], ids=lambda c: c.name)
def test_command_block_runs(block: Commands, tmp_path: Any) -> None:
    """Each line of a page's command block, in order, in a shell in a fresh directory holding the
    repository's `examples/` (the commands are typed from the repository root), with this
    environment's `epochal` and `python` first on the PATH: each succeeds. The README's tour is
    run line by line by tests/test_new_user.py, in a fresh virtualenv, with its outputs checked:
    not twice."""
    os.symlink(os.path.join(REPO, "examples"), tmp_path / "examples")
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    for line in block.lines:
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{block.name}: `{line}` exited with {done.returncode}:\n{done.stderr[-3000:]}"
