"""The results of ``sbrules test`` as text, JSON (schemas/test.schema.json), JUnit XML, GitHub
annotations and Markdown; findings about the test files go through ``reconciler.diagnostics``."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any, Sequence

from reconciler import diagnostics
from reconciler.diagnostics import Diagnostic
from reconciler.ruletests.run import CaseResult, Finding

FORMATS = ("text", "json", "junit", "github", "markdown")


def summary(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> dict[str, int]:
    statuses = Counter(r.status for r in results)
    tally = diagnostics.counts(diags)
    return {
        "cases": len(results), "passed": statuses["passed"], "failed": statuses["failed"],
        "skipped": statuses["skipped"], "errors": tally["error"], "warnings": tally["warning"],
    }


def succeeded(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> bool:
    counted = summary(results, diags)
    return counted["failed"] == 0 and counted["errors"] == 0


def failure_lines(result: CaseResult) -> list[str]:
    """What went wrong in a failed case, one line each (the deciding rules indented)."""
    lines = [result.note] if result.note else []
    if result.findings or result.receivers:
        lines.append("receivers: " + (", ".join(result.receivers) or "none"))
    for finding in result.findings:
        lines.append(f"{finding.subscription}: expected {finding.expected}; actually {finding.actual}")
        lines.extend("  " + _verdict(v) for v in finding.rules)
    return lines


def _verdict(verdict: Any) -> str:
    return f"rule {verdict.name}: {verdict.result} — {verdict.decision}"


def render_text(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> str:
    out = [diagnostics.render_text(diags)] if diags else []
    for result in results:
        if result.status == "failed":
            out.append(f"{result.case.origin}: FAIL {result.case.name} (topic {result.case.topic})")
            out.extend("  " + line for line in failure_lines(result))
    counted = summary(results, diags)
    line = f"{counted['passed']} passed, {counted['failed']} failed, {counted['skipped']} skipped"
    if counted["errors"]:
        line += f", {counted['errors']} errors in the test files"
    out.append(line)
    return "\n".join(out)


def _finding_json(finding: Finding) -> dict[str, Any]:
    return {
        "subscription": finding.subscription,
        "expected": finding.expected,
        "actual": finding.actual,
        "rules": [
            {
                "name": v.name, "result": v.result, "error": v.error,
                "deciding": {"expression": v.decision.expression, "result": v.decision.result, "reason": v.decision.reason},
            }
            for v in finding.rules
        ],
    }


def to_document(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> dict[str, Any]:
    """The ``sbrules test --format json`` document."""
    return {
        "format_version": 1,
        "passed": succeeded(results, diags),
        "summary": summary(results, diags),
        "cases": [
            {
                "name": r.case.name, "topic": r.case.topic, "file": r.case.origin.file, "line": r.case.origin.line,
                "column": r.case.origin.column, "status": r.status, "receivers": r.receivers, "note": r.note or None,
                "findings": [_finding_json(f) for f in r.findings],
            }
            for r in results
        ],
        "diagnostics": [diagnostics.to_json(d) for d in diags],
    }


def render_junit(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> str:
    """JUnit XML, one test suite per test file, for CI test tabs."""
    root = ET.Element("testsuites", name="sbrules test")
    suites: dict[str, ET.Element] = {}

    def suite(file: str) -> ET.Element:
        if file not in suites:
            suites[file] = ET.SubElement(root, "testsuite", name=file)
        return suites[file]

    for result in results:
        case = ET.SubElement(
            suite(result.case.origin.file), "testcase", name=result.case.name, classname=result.case.origin.file,
            file=result.case.origin.file, line=str(result.case.origin.line),
        )
        if result.status == "failed":
            lines = failure_lines(result)
            failure = ET.SubElement(case, "failure", message=lines[0] if lines else "failed")
            failure.text = "\n".join(lines)
        elif result.status == "skipped":
            ET.SubElement(case, "skipped", message=result.note)
    for diag in diags:
        if diag.severity == "error":
            file = diag.origin.file if diag.origin else "<input>"
            case = ET.SubElement(suite(file), "testcase", name=f"{diag.location()} [{diag.code}]", classname=file)
            ET.SubElement(case, "error", message=diag.message).text = diagnostics.render_text([diag])
    for element in suites.values():
        cases = element.findall("testcase")
        element.set("tests", str(len(cases)))
        element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        element.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
        element.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")


def _as_diagnostics(results: Sequence[CaseResult]) -> list[Diagnostic]:
    return [
        Diagnostic("error", "test-failed", f"{r.case.name}: " + " | ".join(failure_lines(r)), r.case.origin)
        for r in results if r.status == "failed"
    ]


def render_github(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> str:
    """GitHub Actions annotations at each failing case (and each finding about the test files)."""
    return diagnostics.render_github([*diags, *_as_diagnostics(results)])


def render_markdown(results: Sequence[CaseResult], diags: Sequence[Diagnostic]) -> str:
    """A pull-request comment: the tally, then one row per subscription that differs."""
    counted = summary(results, diags)
    icon = "✅" if succeeded(results, diags) else "❌"
    out = [f"{icon} **sbrules test**: {counted['passed']} passed, {counted['failed']} failed, {counted['skipped']} skipped"]
    failed = [r for r in results if r.status == "failed"]
    if failed:
        out += ["", "| case | location | subscription | expected | actually | deciding |", "|---|---|---|---|---|---|"]
        for result in failed:
            rows = result.findings or [Finding("—", result.note, "")]
            for finding in rows:
                deciding = "<br>".join(_verdict(v) for v in finding.rules)
                where = f"`{result.case.origin}`"
                cells = [result.case.name, where, finding.subscription, finding.expected, finding.actual, deciding]
                out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if diags:
        out += ["", diagnostics.render_markdown(diags)]
    return "\n".join(out)


RENDERERS = {"text": render_text, "junit": render_junit, "github": render_github, "markdown": render_markdown}
