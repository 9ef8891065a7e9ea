"""Declared names through the loader and plan: names the service keeps apart stay apart, names it
takes for one are a located duplicate (the pairs are ones where Python's lower()/casefold() disagree)."""

from __future__ import annotations

import textwrap

import pytest

from reconciler import rulefiles
from reconciler.model import Rule, TrueFilter
from reconciler.plan.compare import compute_plan

KEPT_APART = [("\u212a", "k"), ("\u00df", "ss"), ("\u0131", "i"), ("\u017f", "s"), ("\u0130", "i")]
ONE_NAME = [("\u00b5", "\u03bc"), ("\u01c5", "\u01c6"), ("\u1f80", "\u1f88")]


def _load(tmp_path, first: str, second: str):
    (tmp_path / "orders.yaml").write_text(
        textwrap.dedent(
            f"""\
            topic: orders
            subscriptions:
              billing:
                rules:
                  - {{name: "r-{first}", filter: true}}
                  - {{name: "r-{second}", filter: false}}
            """
        ),
        encoding="utf-8",
    )
    return rulefiles.load([tmp_path])


@pytest.mark.unit
@pytest.mark.parametrize(("first", "second"), KEPT_APART)
def test_names_the_service_keeps_apart_are_both_planned(tmp_path, first, second):
    result = _load(tmp_path, first, second)
    assert not result.diagnostics
    live = {("orders", "billing"): [Rule("$Default", TrueFilter())]}
    plan = compute_plan(result.state, live)
    created = sorted(c.rule for c in plan.subscriptions[0].changes if c.kind.value == "create")
    assert created == sorted([f"r-{first}", f"r-{second}"])


@pytest.mark.unit
@pytest.mark.parametrize(("first", "second"), ONE_NAME)
def test_names_the_service_takes_for_one_are_a_located_duplicate(tmp_path, first, second):
    result = _load(tmp_path, first, second)
    (diag,) = result.diagnostics
    assert diag.code == "duplicate-rule"
    assert (diag.origin.line, diag.related[0].line) == (6, 5)
    assert f"as 'r-{first}'" in diag.message


@pytest.mark.unit
def test_a_live_rule_spelled_as_the_service_equates_it_is_the_declared_one(tmp_path):
    result = _load(tmp_path, "\u00b5", "other")
    live = {("orders", "billing"): [Rule("r-\u03bc", TrueFilter()), Rule("r-other", TrueFilter())]}
    plan = compute_plan(result.state, live)
    changes = {c.rule: c for c in plan.subscriptions[0].changes}
    assert set(changes) == {"r-\u00b5", "r-other"}  # no create of r-µ and delete of r-μ: one rule, respelled
    assert changes["r-\u00b5"].kind.value == "replace" and changes["r-\u00b5"].reasons == ("name case: 'r-\u03bc' → 'r-\u00b5'",)
