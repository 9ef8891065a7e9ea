"""A saved traffic document reads back as the value that wrote it: ``ImpactReport.from_json`` and
``Analysis.from_json`` undo ``to_json`` through the one JSON writer, and refuse another kind of
document, another version or a malformed one with one line.

Reports here are built without Spark (``conftest.build_report``, the golden analysis); the same
round trip on reports of real Spark runs is in test_impact.py and test_analyze.py.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.errors import ErrorCode, InputError
from reconciler.json_text import json_text
from reconciler.model import Rule, SqlFilter
from reconciler.plan import Change, ChangeKind
from reconciler.traffic.report.model import ChangeTraffic, ImpactReport, Outcome, RuleRef, RuleTraffic, Skipped
from reconciler.traffic.report.render import render_analysis, render_report
from reconciler.traffic.report.routing import Analysis, Bystander, Credits

from .conftest import Traffic, build_report, routing_health

GOLDEN = json.loads((Path(__file__).parent / "golden" / "analyze.json").read_text(encoding="utf-8"))


def saved(doc: dict) -> dict:
    """``doc`` as a file holds it: written by the one JSON writer, read back by json."""
    return json.loads(json_text(doc))


def every_part() -> ImpactReport:
    """A report using every optional part of the model: a plan's changes (a live rule's creation
    time and look), a Python fallback, a skipped subscription, a renamed topic, routing health
    whose credits compare before and after and whose bystanders have an owner, non-ASCII names."""
    report = build_report([Traffic(kept=3, gained=2, lost=1, errors=1), Traffic(kept=5)], topic="bestellungen-ü")
    first, second = report.subscriptions
    before = Rule("main", SqlFilter("n = 0 OR legacy = 0"), created_at=dt.datetime(2024, 5, 1, 9, 0, 1, tzinfo=dt.timezone.utc))
    change = Change("bestellungen-ü", first.subscription, "main", ChangeKind.REPLACE, ("sql changed",), before,
                    Rule("main", SqlFilter("n = 0")), ("- n = 0 OR legacy = 0", "+ n = 0"), looks_like="MassTransit")
    first = replace(
        first, namespace_topic="orders-prod", changes=(ChangeTraffic(change, Outcome(4, 0), Outcome(5, 1)),),
        rules=(*first.rules, RuleTraffic("odd", 1, 0, python=True)),
    )
    health = routing_health(GOLDEN)
    (topic,) = health.topics
    credits = Credits(12, 11, True, 3.5, 0.0035, filters_before=9, span_seconds=5400.0)
    undeclared = (Bystander("nsb-sales", 14, "nservicebus"), Bystander("stray", None))
    health = replace(health, topics=(replace(topic, credits=credits, namespace_topic="shop-prod", undeclared=undeclared),))
    return replace(
        report, subscriptions=(first, second), against="plan.json",
        python_fallback_rules=(RuleRef("bestellungen-ü", first.subscription, "odd", "a .NET format string"),),
        never_matching_rules=(RuleRef("bestellungen-ü", second.subscription, "main"),),
        skipped=(Skipped("bestellungen-ü", "gone", "not in the namespace"),), routing_health=health,
    )


@pytest.mark.unit
def test_an_impact_report_reads_back_as_the_report_that_wrote_it():
    report = every_part()
    read = ImpactReport.from_json(saved(report.to_json()))
    assert read == report
    for fmt in ("text", "markdown", "json"):  # html: the analysis's golden page below, the agreement test (Spark)
        assert render_report(read, fmt) == render_report(report, fmt)


@pytest.mark.unit
@settings(max_examples=10, deadline=None)
@given(st.lists(st.builds(Traffic, *[st.integers(0, 40)] * 4), min_size=1, max_size=6), st.integers(0, 30))
def test_generated_impact_reports_read_back(traffic, unrouted):
    report = build_report(traffic, unrouted=unrouted)
    assert ImpactReport.from_json(saved(report.to_json())) == report


@pytest.mark.unit
def test_an_analysis_reads_back_and_writes_the_same_document():
    analysis = Analysis.from_json(GOLDEN)
    assert analysis.to_json() == GOLDEN
    assert Analysis.from_json(saved(analysis.to_json())) == analysis
    assert render_analysis(analysis, "json") + "\n" == json_text(GOLDEN)


@pytest.mark.unit
def test_documents_are_written_by_the_one_writer_headline_first():
    """Keys in the report's own order (what it is and compared, then the counts, the examples last)
    and non-ASCII names as they are."""
    report = every_part()
    text = render_report(report, "json")
    assert text + "\n" == json_text(report.to_json())
    assert list(json.loads(text))[:4] == ["format_version", "dataset", "against", "messages"]
    assert list(json.loads(text))[-1] == "example_messages"
    assert '"bestellungen-ü"' in text and "\\u00fc" not in text
    assert list(json.loads(render_analysis(Analysis.from_json(GOLDEN), "json")))[:3] == ["format_version", "dataset", "source"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("reader", "doc", "message"),
    [
        (ImpactReport.from_json, GOLDEN, "not an sbrules traffic impact report (it has no 'never_matching_rules' member)"),
        (Analysis.from_json, {"format_version": 2, "summary": {}}, "not an sbrules routing-health document"),
        (ImpactReport.from_json, [1, 2], "not an sbrules traffic impact report"),
        (Analysis.from_json, {**GOLDEN, "format_version": 7},
         "routing-health document format_version 7 is not supported (this sbrules reads 1)"),
        (ImpactReport.from_json, {"never_matching_rules": []},
         "traffic impact report format_version None is not supported (this sbrules reads 1)"),
        (Analysis.from_json, {k: v for k, v in GOLDEN.items() if k != "topics"},
         "malformed routing-health document: the document: 'topics' is a required property"),
        (ImpactReport.from_json, {**every_part().to_json(), "messages": "many"},
         "malformed traffic impact report: messages: 'many' is not of type 'integer'"),
    ],
)
def test_another_kind_version_or_shape_is_one_input_error(reader, doc, message):
    with pytest.raises(InputError) as raised:
        reader(doc)
    assert str(raised.value).startswith(message) and raised.value.code is ErrorCode.INPUT


@pytest.mark.unit
@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_show_prints_the_saved_analysis_as_analyze_wrote_it(fmt, run_cli, tmp_path):
    """The golden files are `analyze`'s own outputs on the worked example's sample (test_analyze.py
    keeps them so): `show` of its JSON writes each of them again."""
    suffix = {"text": "txt", "markdown": "md", "json": "json", "html": "html"}[fmt]
    out = tmp_path / f"shown.{suffix}"
    code, _, err = run_cli("show", Path(__file__).parent / "golden" / "analyze.json", "--format", fmt, "--out", out)
    assert code == 0, err
    assert out.read_text(encoding="utf-8") == (Path(__file__).parent / "golden" / f"analyze.{suffix}").read_text(encoding="utf-8")


@pytest.mark.unit
def test_show_prints_a_saved_impact_report_as_it_was_rendered(run_cli, output_schema, tmp_path):
    report = every_part()
    saved = tmp_path / "report.json"
    saved.write_text(render_report(report, "json") + "\n", encoding="utf-8")
    for fmt in ("text", "markdown", "json"):
        code, out, err = run_cli("show", saved, "--format", fmt)
        assert (code, err, out) == (0, "", render_report(report, fmt) + "\n")
    output_schema("traffic-report").validate(json.loads(saved.read_text(encoding="utf-8")))
    code, _, err = run_cli("show", saved, "--format", "markdown", "--out", tmp_path / "report.md")
    assert code == 0 and err == f"wrote the traffic impact report to {tmp_path / 'report.md'}\n"
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == render_report(report, "markdown") + "\n"
