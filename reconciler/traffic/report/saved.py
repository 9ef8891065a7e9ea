"""A document sbrules saved, shown again: a plan (``plan --out``; ``plan --traffic --format json``
with its report as ``traffic``), a traffic impact report (``impact --format json``) or a
routing-health document (``analyze --format json``).

Each kind is told apart by a member only it has, read back into its model, and rendered by the
renderers of the command that wrote it, so a saved document shows exactly as that command showed
it, with no namespace and no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from reconciler.errors import InputError
from reconciler.json_text import json_text
from reconciler.plan import RENDERERS, Plan
from reconciler.traffic.report.model import IMPACT_REPORT, ImpactReport
from reconciler.traffic.report.render import FORMATS, render_analysis, render_report
from reconciler.traffic.report.routing import ANALYSIS, Analysis

#: What ``sbrules show`` reads.
KINDS = "a plan, a traffic impact report or a routing-health document"


@dataclass(frozen=True)
class Saved:
    """A saved document read back: what it is, its formats, and how it renders in each."""

    kind: str
    formats: tuple[str, ...]
    render: Callable[[str], str]

    def shown(self, fmt: str) -> str:
        """The document in ``fmt`` as the command that wrote it prints it (ending in one newline)."""
        text = self.render(fmt)
        return text if text.endswith("\n") else text + "\n"


def read_saved(doc: Any) -> Saved:
    """``doc`` (parsed JSON) as the saved document it is; anything else is one
    :class:`~reconciler.errors.InputError` line (another kind, an unknown version, a malformed one)."""
    if IMPACT_REPORT.recognizes(doc):
        report = ImpactReport.from_json(doc)
        return Saved(IMPACT_REPORT.name, FORMATS, lambda fmt: render_report(report, fmt))
    if ANALYSIS.recognizes(doc):
        analysis = Analysis.from_json(doc)
        return Saved(ANALYSIS.name, FORMATS, lambda fmt: render_analysis(analysis, fmt))
    if _is_plan(doc):
        plan = Plan.from_json(doc)
        if doc.get("traffic") is None:
            return Saved("plan", tuple(RENDERERS), lambda fmt: RENDERERS[fmt](plan))
        traffic = ImpactReport.from_json(doc["traffic"])
        return Saved("plan with its traffic report", tuple(RENDERERS), lambda fmt: plan_with_traffic(plan, traffic, fmt))
    raise InputError(f"not {KINDS} (their JSON, as sbrules wrote it)")


def _is_plan(doc: Any) -> bool:
    """A plan has a ``summary``; so has a drift report, which also says whether it is ``in_sync``."""
    return isinstance(doc, Mapping) and "summary" in doc and "in_sync" not in doc


def plan_with_traffic(plan: Plan, report: ImpactReport, fmt: str) -> str:
    """``plan --traffic``'s output: the plan, then its traffic report (in JSON, the plan's document
    with the report as its ``traffic`` member)."""
    if fmt == "json":
        return json_text({**plan.to_json(), "traffic": report.to_json()})
    shown = RENDERERS[fmt](plan).removesuffix("\n")
    return f"{shown}\n\n{render_report(report, fmt)}\n"
