"""Render an impact report (the dict :func:`reconciler.traffic.impact.impact_report` returns).

``text`` for a terminal, ``markdown`` for a pull-request comment, ``json`` for machines (the dict
itself, stable keys).
"""

from __future__ import annotations

import json
from typing import Any


def render_report(report: dict[str, Any], fmt: str = "text") -> str:
    """The report as ``text``, ``markdown`` or ``json``."""
    if fmt == "json":
        return json.dumps(report, indent=2, sort_keys=True)
    if fmt == "markdown":
        return _markdown(report)
    if fmt == "text":
        return _text(report)
    raise ValueError(f"unknown report format {fmt!r} (text, markdown, json)")


def _signed(n: int, sign: str) -> str:
    return f"{sign}{n:,}" if n else "0"


def _against(report: dict[str, Any]) -> str:
    against = report.get("against", "live")
    return "the live rules" if against == "live" else f"the 'before' side of {against}"


def _text(report: dict[str, Any]) -> str:
    lines = [
        f"Traffic impact on {report['messages']:,} sampled messages ({report.get('dataset', '?')}), "
        f"compared with {_against(report)}",
        "",
    ]
    header = ("SUBSCRIPTION", "DELIVERED", "BEFORE", "GAINED", "LOST", "ERRORS")
    rows = [header]
    for sub in report["subscriptions"]:
        rows.append(
            (
                f"{sub['topic']}/{sub['subscription']}",
                f"{sub['delivered']:,}",
                f"{sub['delivered_before']:,}",
                _signed(sub["gained"], "+"),
                _signed(sub["lost"], "-"),
                f"{sub['errors']:,}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(r[0].ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    lines.append("")
    lines.append(f"Unrouted (no reported subscription takes them): {report['unrouted']:,}{_eg(report['unrouted_examples'])}")
    for sub in report["subscriptions"]:
        lines.append("")
        lines.append(f"{sub['topic']}/{sub['subscription']} (current rules: {sub['current_rules']})")
        width = max((len(r["name"]) for r in sub["rules"]), default=4)
        for rule in sub["rules"]:
            note = "  never matches" if rule["matched"] == 0 else ""
            note += "  [python fallback]" if rule["evaluation"] == "python" else ""
            lines.append(f"  {rule['name'].ljust(width)}  matched {rule['matched']:>9,}  errors {rule['errors']:>7,}{note}")
        for bucket in ("gained", "lost", "errors"):
            if sub["examples"][bucket]:
                lines.append(f"  {bucket} e.g. {', '.join(sub['examples'][bucket])}")
    if report["python_fallback_rules"]:
        lines.append("")
        lines.append("Evaluated by a Python UDF (no native Spark translation; slower):")
        for r in report["python_fallback_rules"]:
            lines.append(f"  {r['topic']}/{r['subscription']}/{r['rule']}: {r['reason']}")
    for skip in report.get("skipped", ()):
        lines.append(f"skipped {skip['topic']}/{skip['subscription']}: {skip['reason']}")
    return "\n".join(lines)


def _eg(examples: list[str]) -> str:
    return f" (e.g. {', '.join(examples)})" if examples else ""


def _markdown(report: dict[str, Any]) -> str:
    lines = [
        "### Traffic impact",
        "",
        f"{report['messages']:,} sampled messages, compared with {_against(report)}. "
        f"**Unrouted** (no reported subscription takes them): {report['unrouted']:,}{_eg(report['unrouted_examples'])}.",
        "",
        "| subscription | delivered | before | gained | lost | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for sub in report["subscriptions"]:
        lines.append(
            f"| `{sub['topic']}/{sub['subscription']}` | {sub['delivered']:,} | {sub['delivered_before']:,} | "
            f"{_signed(sub['gained'], '+')} | {_signed(sub['lost'], '-')} | {sub['errors']:,} |"
        )
    lines += ["", "<details><summary>Per rule</summary>", "", "| subscription | rule | matched | errors |", "|---|---|---:|---:|"]
    for sub in report["subscriptions"]:
        for rule in sub["rules"]:
            flag = " ⚠️ never matches" if rule["matched"] == 0 else ""
            flag += " (python fallback)" if rule["evaluation"] == "python" else ""
            lines.append(
                f"| `{sub['topic']}/{sub['subscription']}` | `{rule['name']}`{flag} | {rule['matched']:,} | {rule['errors']:,} |"
            )
    lines += ["", "</details>"]
    examples = [
        f"- `{sub['topic']}/{sub['subscription']}` {bucket}: " + ", ".join(f"`{x}`" for x in sub["examples"][bucket])
        for sub in report["subscriptions"]
        for bucket in ("gained", "lost", "errors")
        if sub["examples"][bucket]
    ]
    if examples:
        lines += ["", "Example message ids:", *examples]
    if report["python_fallback_rules"]:
        lines += ["", "Rules evaluated by a Python UDF (no native translation):"]
        lines += [f"- `{r['topic']}/{r['subscription']}/{r['rule']}`: {r['reason']}" for r in report["python_fallback_rules"]]
    return "\n".join(lines)
