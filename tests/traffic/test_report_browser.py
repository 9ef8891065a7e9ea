"""The HTML report in a real browser (headless Chromium): it renders its chart at one scale,
logs no error, requests nothing but itself, and its example messages open to their properties."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from reconciler.traffic.report.render import render_report

from .conftest import Traffic, build_report, routing_health

CHROMIUM = shutil.which("chromium")
# CI installs Chromium (.ci/run), so there a missing browser fails the test instead of skipping it.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"), reason="no chromium on PATH (apt-get install chromium; .ci/run does)"
    ),
]

BARS = """els => els.map(e => {
  const r = e.getBoundingClientRect();
  return {sub: e.dataset.subscription, side: e.dataset.side, kind: e.dataset.kind,
          value: Number(e.dataset.value), x: r.x, width: r.width, height: r.height};
})"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"],
        )
        yield browser
        browser.close()


def test_report_renders_in_a_browser_and_fetches_nothing(browser, tmp_path):
    traffic = [Traffic(kept=40 + 9 * i, gained=(5 * i) % 17, lost=(3 * i) % 11, errors=i % 4) for i in range(70)]
    report = build_report(traffic, unrouted=12)
    doc = json.loads(render_report(report, "json"))
    path = tmp_path / "report.html"
    path.write_text(render_report(report, "html"), encoding="utf-8")

    page = browser.new_page(viewport={"width": 1200, "height": 900})
    messages, requests, failed = [], [], []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.goto(path.as_uri(), wait_until="load")

    assert requests == [path.as_uri()] and not failed
    assert messages == []

    bars = page.eval_on_selector_all("svg.movement rect.bar", BARS)
    subs = {f"{s['topic']}/{s['subscription']}": s for s in doc["subscriptions"]}
    moving = [p for p, s in subs.items() if s["gained"] or s["lost"]]
    drawn = {b["sub"] for b in bars}
    assert len(bars) == 4 * len(drawn) and len(drawn) == min(len(moving), 50)
    scale = None
    for sub in drawn:
        mine = {(b["side"], b["kind"]): b for b in bars if b["sub"] == sub}
        entry = subs[sub]
        before = mine["before", "kept"]["width"] + mine["before", "lost"]["width"]
        after = mine["after", "kept"]["width"] + mine["after", "gained"]["width"]
        scale = scale or before / entry["delivered_before"]
        # Drawn lengths are the JSON numbers at one scale (to within a pixel).
        assert before == pytest.approx(entry["delivered_before"] * scale, abs=1)
        assert after == pytest.approx(entry["delivered"] * scale, abs=1)
        assert mine["before", "lost"]["width"] == pytest.approx(entry["lost"] * scale, abs=1)
        assert mine["after", "gained"]["width"] == pytest.approx(entry["gained"] * scale, abs=1)
        assert mine["before", "lost"]["x"] == pytest.approx(mine["before", "kept"]["x"] + mine["before", "kept"]["width"], abs=0.5)
        assert all(b["height"] > 5 for b in mine.values())

    first = next(iter(drawn))
    cell = page.locator(f'tr[data-subscription="{first}"] td[data-field="delivered"]')
    assert cell.inner_text().replace(",", "") == str(subs[first]["delivered"])

    example = page.locator("details.example").first
    table = example.locator("table")
    assert not table.is_visible()
    example.locator("summary").click()
    assert table.is_visible() and "sys.MessageId" in table.inner_text()
    page.close()


def test_the_analysis_page_renders_its_chart_findings_and_examples_in_a_browser(browser, tmp_path):
    """``analyze --format html`` is the impact report's routing-health section on a page of its own:
    its bars are the JSON numbers at one scale, every finding is a row with its evidence, and the
    unrouted examples open to their properties; nothing but the page is requested."""
    from dataclasses import replace
    from pathlib import Path

    from reconciler.traffic.report.render import render_analysis
    from reconciler.traffic.report.routing import Analysis

    golden = json.loads((Path(__file__).parent / "golden" / "analyze.json").read_text(encoding="utf-8"))
    health = routing_health(golden)
    report = build_report([Traffic(kept=3)], unrouted=5)
    (topic,) = health.topics
    ids = tuple(sorted(report.example_messages))[:3]
    health = replace(health, topics=(replace(topic, unrouted=replace(topic.unrouted, examples=ids)),))
    doc = Analysis("samples/shop", health, report.time_range, (), report.example_messages)
    path = tmp_path / "analysis.html"
    path.write_text(render_analysis(doc, "html"), encoding="utf-8")

    page = browser.new_page(viewport={"width": 1200, "height": 900})
    messages, requests = [], []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    assert requests == [path.as_uri()] and messages == []

    bars = {b["kind"]: b for b in page.eval_on_selector_all("svg.health rect.bar", BARS.replace("side: e.dataset.side", "topic: e.dataset.topic"))}
    shown = golden["topics"][0]
    assert bars["unrouted"]["value"] == shown["unrouted"]["count"]
    assert bars["received"]["value"] == shown["messages"] - shown["unrouted"]["count"]
    scale = (bars["received"]["width"] + bars["unrouted"]["width"]) / shown["messages"]
    assert bars["unrouted"]["width"] == pytest.approx(shown["unrouted"]["count"] * scale, abs=1)
    assert page.locator('tr[data-topic="shop"] td[data-field="unrouted"]').inner_text() == str(shown["unrouted"]["count"])
    assert page.locator("table.findings tbody tr").count() == len(golden["findings"])

    example = page.locator('article[data-topic="shop"] details.example').first
    table = example.locator("table")
    assert not table.is_visible()
    example.locator("summary").click()
    assert table.is_visible() and "sys.MessageId" in table.inner_text()
    page.close()
