"""The markdown chart, the verdict and the HTML report say exactly what the JSON report says.

Reports are built from grouped outcomes without Spark (``conftest.build_report``), so the sizes a
pull request can reach (hundreds of subscriptions) are cheap to test.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest

from reconciler.model import TypedValue, rule_from_doc
from reconciler.traffic.report.markdown import MARKDOWN_CHART_ROWS
from reconciler.traffic.report.mermaid import movement_chart
from reconciler.traffic.report.render import render_report

from .conftest import Traffic, build_report

GITHUB_COMMENT_LIMIT = 65_536  # characters GitHub accepts in one comment body
MERMAID_MAX_TEXT = 50_000  # Mermaid's default maxTextSize: longer diagrams are not drawn


def many(n: int) -> list[Traffic]:
    """n subscriptions, most of them changing by different amounts, some with errors."""
    return [
        Traffic(kept=100 + 7 * i, gained=(i * 37) % 50 if i % 3 else 0, lost=(i * 11) % 23 if i % 4 else 0, errors=i % 5)
        for i in range(n)
    ]


def mermaid_block(markdown: str) -> str:
    match = re.search(r"```mermaid\n(.*?)\n```", markdown, re.S)
    assert match, markdown[:2000]
    return match.group(1)


def parse_chart(block: str) -> tuple[list[str], list[list[int]], int]:
    categories = re.findall(r'"([^"]*)"', re.search(r"x-axis \[(.*)\]", block).group(1))
    bars = [[int(v) for v in values.split(", ")] for values in re.findall(r"^\s*bar \[(.*)\]$", block, re.M)]
    top = int(re.search(r"y-axis .* 0 --> (\d+)", block).group(1))
    return categories, bars, top


def number(text: str) -> int:
    return int(text.replace(",", "").replace("+", "").replace("−", "").replace("-", "") or 0)


# ------------------------------------------------------------------------------------------------
# markdown
# ------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_markdown_chart_draws_the_largest_changes_with_the_json_numbers():
    report = build_report(many(60), unrouted=9)
    doc = json.loads(render_report(report, "json"))
    markdown = render_report(report, "markdown")
    categories, (before, after, kept), top = parse_chart(mermaid_block(markdown))

    by_path = {f"{s['topic']}/{s['subscription']}": s for s in doc["subscriptions"]}
    moving = [s for s in doc["subscriptions"] if s["gained"] or s["lost"]]
    assert len(moving) > MARKDOWN_CHART_ROWS and len(categories) == 2 * MARKDOWN_CHART_ROWS
    drawn = []
    for k in range(MARKDOWN_CHART_ROWS):
        path = categories[2 * k].split(" before: ")[0]
        sub = by_path[path]
        drawn.append(sub)
        assert categories[2 * k + 1].startswith(f"{path} after: {sub['delivered']:,} (")
        assert (before[2 * k], after[2 * k]) == (sub["delivered_before"], 0)
        assert (before[2 * k + 1], after[2 * k + 1]) == (0, sub["delivered"])
        assert kept[2 * k] == kept[2 * k + 1] == sub["delivered_before"] - sub["lost"] == sub["delivered"] - sub["gained"]
    assert top == max(max(s["delivered_before"], s["delivered"]) for s in drawn)
    # The largest movements, largest first; everything not drawn moves no more than what is.
    moved = [s["gained"] + s["lost"] for s in drawn]
    rest = [s for s in moving if s not in drawn]
    assert moved == sorted(moved, reverse=True)
    assert max(s["gained"] + s["lost"] for s in rest) <= min(moved)

    note = re.search(r"(\d+) more changed subscriptions not drawn: \+([\d,]+) −([\d,]+) messages in all", markdown)
    assert note, markdown
    assert [number(g) for g in note.groups()] == [len(rest), sum(s["gained"] for s in rest), sum(s["lost"] for s in rest)]
    assert f"{len(doc['subscriptions']) - len(moving)} subscriptions unchanged" in markdown

    rows = re.findall(r"^\| `([^`]+)` \| ([\d,]+) \| ([\d,]+) \| ([+\d,]+) \| ([-\d,]+) \| ([\d,]+) \|$", markdown, re.M)
    table = {path: tuple(number(v) for v in values) for path, *values in rows}
    assert table == {
        f"{s['topic']}/{s['subscription']}": (s["delivered"], s["delivered_before"], s["gained"], s["lost"], s["errors"])
        for s in doc["subscriptions"]
    }


@pytest.mark.unit
def test_markdown_for_200_subscriptions_fits_a_github_comment():
    report = build_report(many(200), unrouted=40)
    markdown = render_report(report, "markdown")
    assert len(markdown) < GITHUB_COMMENT_LIMIT
    assert len(mermaid_block(markdown)) < MERMAID_MAX_TEXT
    assert "Left out" not in markdown  # 200 subscriptions still fit with every section


@pytest.mark.slow
def test_a_comment_too_large_for_github_keeps_the_verdict_chart_and_table_and_says_what_it_left_out():
    report = build_report(many(800))  # enough for the per-rule counts to be left out too
    markdown = render_report(report, "markdown")
    assert len(markdown) < GITHUB_COMMENT_LIMIT
    assert report.verdict in markdown and "```mermaid" in markdown
    assert "Left out to stay within GitHub's comment size limit" in markdown
    assert "per-rule counts" in markdown.split("Left out")[1]
    # The table keeps the largest changes first.
    first_row = re.search(r"^\| `([^`]+)` \|", markdown, re.M).group(1)
    assert first_row == report.changed()[0].path


@pytest.mark.unit
def test_chart_labels_stay_distinct_when_long_names_are_shortened():
    report = build_report([Traffic(5, 1, 0), Traffic(5, 0, 1)], topic="t" * 80)
    categories, _, _ = parse_chart(mermaid_block(render_report(report, "markdown")))
    assert len(set(categories)) == len(categories) == 4
    assert all(len(c) < 90 for c in categories)


@pytest.mark.unit
def test_no_change_no_chart():
    report = build_report([Traffic(kept=10), Traffic(kept=3, errors=2)])
    markdown = render_report(report, "markdown")
    assert "```mermaid" not in markdown
    assert report.verdict == (
        "No subscription changes: the 2 subscriptions take the same sampled messages as before; "
        "2 message copies would be dead-lettered (filter errors in 1 subscription)."
    )


@pytest.mark.parametrize(
    ("traffic", "expected"),
    [
        (
            [Traffic(129, 0, 171), Traffic(60, 25, 0), Traffic(10, 1, 1), *[Traffic(50)] * 4],
            "3 of 7 subscriptions change; orders/billing loses 171 of its 300 sampled messages.",
        ),
        ([Traffic(60, 25, 0)], "1 of 1 subscription changes; orders/billing gains 25 sampled messages (60 → 85)."),
        (
            [Traffic(4, 2, 1, errors=1)],
            "1 of 1 subscription changes; orders/billing gains 2 and loses 1 sampled messages (5 → 6); "
            "1 message copy would be dead-lettered (filter errors in 1 subscription).",
        ),
    ],
)
@pytest.mark.unit
def test_verdict(traffic, expected):
    report = build_report(traffic)
    report = replace(report, subscriptions=(replace(report.subscriptions[0], subscription="billing"), *report.subscriptions[1:]))
    assert report.verdict == expected
    assert expected in render_report(report, "markdown") and expected in render_report(report, "text")


@pytest.mark.unit
def test_movement_chart_orders_series_so_kept_is_drawn_last():
    """Mermaid draws bar series one over the other in order: 'kept' must come last to leave the
    lost and gained ends of the two totals visible."""
    lines = movement_chart(build_report([Traffic(3, 2, 1)]).changed(), 5)
    bars = [line.split("bar ")[1] for line in lines if line.strip().startswith("bar ")]
    assert bars == ["[4, 0]", "[0, 5]", "[3, 3]"]
    palette = re.search(r'"plotColorPalette": "([^"]+)"', lines[1]).group(1).split(", ")
    assert len(palette) == 3 and len(set(palette)) == 3


# ------------------------------------------------------------------------------------------------
# html
# ------------------------------------------------------------------------------------------------


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of elements marked with data-field."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.fields: list[tuple[dict[str, str], str]] = []  # (attrs of the enclosing row, text)
        self.style = ""
        self._row: dict[str, str] = {}
        self._field: dict[str, str] | None = None
        self._text = ""
        self._in_style = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attrs))
        if tag == "tr":
            self._row = attrs
        if "data-field" in attrs:
            self._field, self._text = attrs, ""
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if self._field is not None and tag in ("td", "th"):
            self.fields.append(({**self._row, "field": self._field["data-field"]}, self._text.strip()))
            self._field = None
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._field is not None:
            self._text += data
        if self._in_style:
            self.style += data

    def all(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def report():
    return build_report(many(60), unrouted=9)


@pytest.fixture(scope="module")
def page(report):
    return Page(render_report(report, "html"))


@pytest.mark.unit
def test_html_chart_bars_carry_the_json_numbers_at_one_scale(report, page):
    doc = json.loads(render_report(report, "json"))
    by_path = {f"{s['topic']}/{s['subscription']}": s for s in doc["subscriptions"]}
    bars = page.all("rect")
    assert bars and all("bar" in b["class"] for b in bars)
    moving = [s for s in doc["subscriptions"] if s["gained"] or s["lost"]]
    drawn = {b["data-subscription"] for b in bars}
    assert len(bars) == 4 * len(drawn) and len(drawn) == min(len(moving), 50)
    scales = set()
    for bar in bars:
        sub = by_path[bar["data-subscription"]]
        expected = {
            ("before", "kept"): sub["delivered_before"] - sub["lost"],
            ("before", "lost"): sub["lost"],
            ("after", "kept"): sub["delivered"] - sub["gained"],
            ("after", "gained"): sub["gained"],
        }[(bar["data-side"], bar["data-kind"])]
        assert int(bar["data-value"]) == expected
        if expected:
            scales.add(round(float(bar["width"]) / expected, 3))
    assert len(scales) == 1  # one scale for every bar: lengths compare


@pytest.mark.unit
def test_html_tables_carry_the_json_numbers(report, page):
    doc = json.loads(render_report(report, "json"))
    subs = {
        (row["data-subscription"], row["field"]): number(text)
        for row, text in page.fields
        if "data-subscription" in row
    }
    for s in doc["subscriptions"]:
        path = f"{s['topic']}/{s['subscription']}"
        for field in ("delivered", "delivered_before", "gained", "lost", "errors"):
            assert subs[(path, field)] == s[field], (path, field)
    rules = [(row["data-rule"], row["field"], number(text)) for row, text in page.fields if "data-rule" in row]
    expected = [(r["name"], f, r[f]) for s in doc["subscriptions"] for r in s["rules"] for f in ("matched", "errors")]
    assert sorted(rules) == sorted(expected)


@pytest.mark.unit
def test_html_shows_examples_with_properties_changes_and_the_sample(report):
    html = render_report(report, "html")
    page = Page(html)
    report = report.to_json()
    shown = {a["data-message-id"] for a in page.all("details")}
    wanted = {i for s in report["subscriptions"] for b in s["examples"].values() for i in b} | set(report["unrouted_examples"])
    assert wanted and shown == wanted
    assert set(report["example_messages"]) == wanted
    assert ">order.placed<" in html and "sys.Label" in html and ">Region<" in html
    for sub in report["subscriptions"]:
        for change in sub["changes"]:
            assert change["before"]["sql"] in html and change["after"]["sql"] in html
    assert "2024-05-01 10:00:00 → 2024-05-01" in html
    assert f"{report['messages']:,}" in html and report["dataset"] in html


@pytest.mark.unit
def test_html_fetches_nothing(page):
    fetching = {"script", "link", "img", "iframe", "object", "embed", "audio", "video", "source", "base", "form", "image", "use"}
    assert not [t for t, _ in page.tags if t in fetching]
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert name not in ("src", "srcset", "action", "xlink:href", "poster", "data"), (tag, name)
            if name == "href":
                assert value.startswith("#"), (tag, value)
    assert "url(" not in page.style and "@import" not in page.style
    (csp,) = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in csp


@pytest.mark.unit
def test_html_escapes_what_publishers_put_in_properties(report):
    (ident, first), *_ = report.example_messages.items()
    message = replace(first.message, user={**first.message.user, "note": TypedValue.infer("<script>alert(1)</script>")})
    evil = replace(report, example_messages={**report.example_messages, ident: replace(first, message=message)})
    html = render_report(evil, "html")
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.unit
def test_the_html_report_shows_multi_line_sql_as_plain_sql():
    from reconciler.traffic.report.html import _rule_yaml

    rule = rule_from_doc({"name": "paid-eu", "sql": "sys.Label = 'order.paid'\nAND region = 'eu'", "action": "SET a = 1;\nSET b = 2"})
    shown = _rule_yaml(rule)
    assert shown == "sql: |-\n  sys.Label = 'order.paid'\n  AND region = 'eu'\naction: |-\n  SET a = 1;\n  SET b = 2"
