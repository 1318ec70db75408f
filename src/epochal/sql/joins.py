"""Joins on streams (not yet: refused with their position)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from .errors import refuse

if TYPE_CHECKING:
    from .planner import Planner, Relation


def plan_joins(planner: Planner, select: exp.Select, left: Relation) -> Relation:
    raise refuse(select.args["joins"][0], planner.query, "JOIN is not supported yet")
