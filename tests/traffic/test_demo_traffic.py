"""The demo's traffic step: published messages are sampled and the impact of the plan is reported."""

from __future__ import annotations

import re
from pathlib import Path

from reconciler.demo import demo_rules, drifted_namespace, run_demo
from reconciler.demo.traffic import catch_all_subscriptions
from reconciler.rulefiles import load_paths


def _row(text: str, subscription: str) -> dict[str, int]:
    line = next(line for line in text.splitlines() if re.match(re.escape(subscription) + r"\s+\d", line))
    delivered, before, gained, lost, errors = (int(v) for v in re.findall(r"[+-]?\d+", line))
    return {"delivered": delivered, "before": before, "gained": gained, "lost": lost, "errors": errors}


def test_catch_alls_come_from_the_live_state():
    with demo_rules() as rules:
        live, _ = drifted_namespace(load_paths([rules]))
    found = catch_all_subscriptions(live)
    assert set(found) == {"orders", "payments"}
    for topic, sub in found.items():
        rules = live.topic(topic).subscription(sub).rules
        assert any(r.filter.__class__.__name__ == "TrueFilter" for r in rules)


def test_demo_reports_who_gains_and_loses(spark):
    lines: list[str] = []
    assert run_demo(None, lines.append, traffic=True)
    text = "\n".join(lines)
    assert "2. sbrules sample + plan --traffic" in text
    assert "Traffic impact on 600 sampled messages" in text
    billing = _row(text, "orders/billing")
    assert billing["before"] == 300 and billing["lost"] < 0  # the live $Default catch-all goes away
    assert billing["errors"] > 0  # publishers that send amount as a string hit 'amount > 1000'
    shipping = _row(text, "orders/shipping")
    assert shipping["gained"] > 0  # 'express' now matches int priority 1, as publishers send it
    assert "never matches" in text  # the paused-experiments false filter
    html_path = Path(re.search(r"The same report as one HTML file .*: (\S+\.html)$", text, re.M).group(1))
    try:
        html = html_path.read_text(encoding="utf-8")
        assert html.startswith("<!doctype html>") and 'class="bar lost" data-subscription="orders/billing"' in html
        assert "300 before" in html  # billing's bar: the catch-all took every sampled order
    finally:
        html_path.unlink()
    assert "In sync" in text
