"""The reference pages list what the code has: every config field (with its default) in
docs/configuration.md, every `StreamEnvironment` argument, and every flag of every `epochal`
subcommand in docs/operations.md."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
from typing import Any

import pytest
from doc_blocks import DOCS, REPO, pages

import epochal.config
from epochal import StreamEnvironment
from epochal.cli.main import build_parser

_ROW = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|\s*([^|]*?)\s*\|")


def _sections(page: str) -> dict[str, str]:
    """The text of each `## ` section of a docs page, by heading."""
    with open(os.path.join(DOCS, page), encoding="utf-8") as f:
        text = f.read()
    sections: dict[str, str] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.strip().strip("`")] = body
    return sections


def _table(section: str) -> dict[str, str]:
    """The first two columns of a section's table rows whose first cell is `name`."""
    return {m.group(1): m.group(2) for m in map(_ROW.match, section.splitlines()) if m}


# epochal.config imports nothing from Epochal, so every dataclass in it is defined there (their
# `__module__` says "epochal": the package re-exports them under its own name)
CONFIG_CLASSES = [
    cls for _, cls in inspect.getmembers(epochal.config, inspect.isclass) if dataclasses.is_dataclass(cls)
]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    assert f.default_factory is not dataclasses.MISSING, f"{f.name} has no default"
    return f.default_factory()


def test_every_config_dataclass_is_found() -> None:
    names = {cls.__name__ for cls in CONFIG_CLASSES}
    assert {"CheckpointConfig", "StateConfig", "RestartStrategy", "JobConfig"} <= names


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_configuration_md_documents_every_field_with_its_default(cls: type) -> None:
    sections = _sections("configuration.md")
    assert cls.__name__ in sections, f"docs/configuration.md has no '## {cls.__name__}' section"
    rows = _table(sections[cls.__name__])
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(rows) == set(fields), f"{cls.__name__}: documented {sorted(rows)}, in the code {sorted(fields)}"
    namespace = {c.__name__: c for c in CONFIG_CLASSES}
    for name, f in fields.items():
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            assert rows[name] == "required", f"{cls.__name__}.{name} has no default: the docs must say 'required'"
            continue
        documented = eval(rows[name].strip("`"), namespace)  # a literal, or e.g. `CheckpointConfig()`
        assert documented == _default(f), f"{cls.__name__}.{name}: docs say {rows[name]}, code {_default(f)!r}"


def test_configuration_md_documents_every_stream_environment_argument() -> None:
    rows = _table(_sections("configuration.md")["StreamEnvironment"])
    parameters = set(inspect.signature(StreamEnvironment.__init__).parameters) - {"self"}
    assert set(rows) == parameters


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every leaf subcommand of `parser`, by its words (`"checkpoints list"`)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_subcommands(sub, (*path, name)))
    if not found and path:
        found[" ".join(path)] = parser
    return found


SUBCOMMANDS = _subcommands(build_parser())


def test_the_cli_has_the_subcommands_the_docs_describe() -> None:
    assert set(SUBCOMMANDS) == {"run", "status", "cancel", "rescale", "move", "query", "checkpoints list",
                                "savepoint", "savepoint rescale-groups", "history", "serve", "patch",
                                "resize"}


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_operations_md_documents_every_flag_of_every_subcommand(command: str) -> None:
    """Some section shows the command's synopsis (`epochal <command> ...`) and names each of its
    flags, and each choice a flag takes."""
    sections = [body for body in _sections("operations.md").values() if f"epochal {command} " in body]
    assert sections, f"docs/operations.md has no section with `epochal {command} ...`"
    wanted = []
    for action in SUBCOMMANDS[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        wanted.extend(action.option_strings)
        if action.option_strings and action.choices:
            wanted.extend(str(choice) for choice in action.choices)
    assert any(all(word in body for word in wanted) for body in sections), (
        f"`epochal {command}`: a section of docs/operations.md must name {wanted}"
    )


# Source files the pages name, e.g. `runtime/master/coordinator.py` or `examples/wordcount.py`.
_PATH = re.compile(
    r"`((?:api|plan|runtime|state|cluster|connectors|cli|spark|examples|benchmarks)/[\w/.-]*\.(?:py|md))`"
)
# Generated from benchmarks/what_made_it_fast.md and the results: a record of what was changed
# where, at the time.
_HISTORY = {"benchmarks.md"}


def test_the_source_files_the_pages_name_exist() -> None:
    missing = []
    for page in pages():
        if os.path.basename(page) in _HISTORY:
            continue
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            text = f.read()
        for path in sorted(set(_PATH.findall(text))):
            top = path.split("/")[0]
            root = REPO if top in ("examples", "benchmarks") else os.path.join(REPO, "src", "epochal")
            if not os.path.exists(os.path.join(root, path)):
                missing.append(f"{page}: {path}")
    assert not missing, "pages name files that do not exist:\n" + "\n".join(missing)


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to '-'."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    anchors: set[str] = set()
    in_code = False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            n, unique = 0, slug
            while unique in anchors:
                n += 1
                unique = f"{slug}-{n}"
            anchors.add(unique)
    return anchors


def test_the_links_between_pages_lead_somewhere() -> None:
    broken = []
    for page in pages():
        here = os.path.dirname(os.path.join(REPO, page))
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            text = f.read()
        for target in _LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(here, file)) if file else os.path.join(REPO, page)
            if not os.path.exists(path):
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and path.endswith(".md") and anchor not in _anchors(path):
                broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)
