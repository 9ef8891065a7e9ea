"""Render an impact report (the dict :func:`reconciler.traffic.impact.impact_report` returns).

``text`` for a terminal, ``markdown`` for a pull-request comment (a verdict, a Mermaid chart, the
table; kept under GitHub's comment size limit), ``html`` for one self-contained file
(:mod:`reconciler.traffic.html_report`), ``json`` for machines (the dict itself, stable keys).
Every format renders the same dict; what a format needs that the numbers do not say directly (the
verdict, which subscriptions move most) is derived here, once, for all of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

FORMATS = ("text", "markdown", "json", "html")

#: GitHub refuses a comment body longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
#: Changed subscriptions drawn in the pull-request chart; the rest are summed up under it.
MARKDOWN_CHART_ROWS = 12


def render_report(report: dict[str, Any], fmt: str = "text") -> str:
    """The report as ``text``, ``markdown``, ``json`` or ``html``."""
    if fmt == "json":
        return json.dumps(report, indent=2, sort_keys=True)
    if fmt == "markdown":
        return _markdown(report)
    if fmt == "text":
        return _text(report)
    if fmt == "html":
        from reconciler.traffic.html_report import render_html

        return render_html(report)
    raise ValueError(f"unknown report format {fmt!r} ({', '.join(FORMATS)})")


# ------------------------------------------------------------------------------------------------
# What every format says: who moves, by how much, and the verdict
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Movement:
    """One subscription's delivered messages before → after, split into kept, lost and gained."""

    topic: str
    subscription: str
    before: int
    after: int
    gained: int
    lost: int
    errors: int

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.subscription}"

    @property
    def kept(self) -> int:
        """Delivered both before and after the change."""
        return self.before - self.lost

    @property
    def moved(self) -> int:
        return self.gained + self.lost


def movement(sub: dict[str, Any]) -> Movement:
    return Movement(
        sub["topic"], sub["subscription"], sub["delivered_before"], sub["delivered"], sub["gained"], sub["lost"], sub["errors"]
    )


def ranked(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The subscriptions, those that gain or lose the most messages first; then, in the report's
    order, those that do not change."""
    subs = report["subscriptions"]
    changed = sorted(
        (s for s in subs if s["gained"] or s["lost"]),
        key=lambda s: (-(s["gained"] + s["lost"]), -abs(s["delivered"] - s["delivered_before"]), s["topic"], s["subscription"]),
    )
    return changed + [s for s in subs if not (s["gained"] or s["lost"])]


def changed(report: dict[str, Any]) -> list[Movement]:
    """Movements of the subscriptions that gain or lose messages, the largest first."""
    return [movement(s) for s in ranked(report) if s["gained"] or s["lost"]]


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def _moves(m: Movement) -> str:
    if not m.gained:
        return f"loses {m.lost:,} of its {_plural(m.before, 'sampled message')}"
    if not m.lost:
        return f"gains {_plural(m.gained, 'sampled message')} ({m.before:,} → {m.after:,})"
    return f"gains {m.gained:,} and loses {m.lost:,} sampled messages ({m.before:,} → {m.after:,})"


def verdict(report: dict[str, Any]) -> str:
    """One line for a reviewer: how many subscriptions change, the biggest move, the errors."""
    subs = report["subscriptions"]
    moves = changed(report)
    if moves:
        top = moves[0]
        verb = "changes" if len(moves) == 1 else "change"
        line = f"{len(moves):,} of {_plural(len(subs), 'subscription')} {verb}; {top.path} {_moves(top)}"
    else:
        line = f"No subscription changes: the {_plural(len(subs), 'subscription')} take the same sampled messages as before"
    failing = [s for s in subs if s["errors"]]
    if failing:
        errors = sum(s["errors"] for s in failing)
        line += (
            f"; {_plural(errors, 'message copy', 'message copies')} would be dead-lettered "
            f"(filter errors in {_plural(len(failing), 'subscription')})"
        )
    return line + "."


def time_span(report: dict[str, Any]) -> str | None:
    """``enqueued 2024-05-01 10:00:00 → 2024-05-01 12:30:00 UTC``, or None when unknown."""
    span = report.get("time_range") or {}
    first, last = span.get("first"), span.get("last")
    if not first or not last:
        return None
    short = lambda iso: iso.replace("T", " ").removesuffix("Z").split(".")[0]  # noqa: E731
    return f"enqueued {short(first)} → {short(last)} UTC"


def _signed(n: int, sign: str) -> str:
    return f"{sign}{n:,}" if n else "0"


def _against(report: dict[str, Any]) -> str:
    against = report.get("against", "live")
    return "the live rules" if against == "live" else f"the 'before' side of {against}"


def _eg(examples: list[str]) -> str:
    return f" (e.g. {', '.join(examples)})" if examples else ""


# ------------------------------------------------------------------------------------------------
# text
# ------------------------------------------------------------------------------------------------


def _text(report: dict[str, Any]) -> str:
    span = time_span(report)
    lines = [
        f"Traffic impact on {report['messages']:,} sampled messages ({report.get('dataset', '?')}"
        f"{', ' + span if span else ''}), compared with {_against(report)}",
        verdict(report),
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
    if report.get("routing_health"):
        from reconciler.traffic.health_report import section_text

        lines += ["", "Routing health of the declared rules", section_text(report["routing_health"])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# markdown (the pull-request comment)
# ------------------------------------------------------------------------------------------------


def _markdown(report: dict[str, Any]) -> str:
    """Verdict, chart and table always; the detail sections while the comment stays under GitHub's
    size limit (the JSON and HTML reports carry everything)."""
    from reconciler.traffic.mermaid import movement_chart

    span = time_span(report)
    head = [
        "### Traffic impact",
        "",
        f"**{verdict(report)}**",
        "",
        f"{report['messages']:,} sampled messages{' (' + span + ')' if span else ''}, compared with {_against(report)}. "
        f"**Unrouted** (no reported subscription takes them): {report['unrouted']:,}{_eg(report['unrouted_examples'])}.",
    ]
    moves = changed(report)
    if moves:
        head += ["", *movement_chart(moves, MARKDOWN_CHART_ROWS)]
    unchanged = len(report["subscriptions"]) - len(moves)
    notes = []
    if len(moves) > MARKDOWN_CHART_ROWS:
        rest = moves[MARKDOWN_CHART_ROWS:]
        notes.append(
            f"{_plural(len(rest), 'more changed subscription')} not drawn: +{sum(m.gained for m in rest):,} "
            f"−{sum(m.lost for m in rest):,} messages in all (largest: `{rest[0].path}` {_moves(rest[0])})."
        )
    if moves and unchanged:
        notes.append(f"{_plural(unchanged, 'subscription')} unchanged.")
    if notes:
        head += ["", "<sub>" + " ".join(notes) + "</sub>"]

    table_head = ["", "| subscription | delivered | before | gained | lost | errors |", "|---|---:|---:|---:|---:|---:|"]
    table = [
        f"| `{sub['topic']}/{sub['subscription']}` | {sub['delivered']:,} | {sub['delivered_before']:,} | "
        f"{_signed(sub['gained'], '+')} | {_signed(sub['lost'], '-')} | {sub['errors']:,} |"
        for sub in ranked(report)
    ]
    sections = [
        ("routing health", _routing_health(report)),
        ("per-rule counts", _per_rule(report)),
        ("example message ids", _examples(report)),
        ("rules evaluated in Python", _fallback(report)),
    ]
    return _fit(head + table_head, table, sections, GITHUB_COMMENT_LIMIT)


def _routing_health(report: dict[str, Any]) -> list[str]:
    if not report.get("routing_health"):
        return []
    from reconciler.traffic.health_report import section_markdown

    return ["", "#### Routing health", "", *section_markdown(report["routing_health"]).splitlines()]


def _per_rule(report: dict[str, Any]) -> list[str]:
    lines = ["", "<details><summary>Per rule</summary>", "", "| subscription | rule | matched | errors |", "|---|---|---:|---:|"]
    for sub in ranked(report):
        for rule in sub["rules"]:
            flag = " ⚠️ never matches" if rule["matched"] == 0 else ""
            flag += " (python fallback)" if rule["evaluation"] == "python" else ""
            lines.append(
                f"| `{sub['topic']}/{sub['subscription']}` | `{rule['name']}`{flag} | {rule['matched']:,} | {rule['errors']:,} |"
            )
    return lines + ["", "</details>"]


def _examples(report: dict[str, Any]) -> list[str]:
    examples = [
        f"- `{sub['topic']}/{sub['subscription']}` {bucket}: " + ", ".join(f"`{x}`" for x in sub["examples"][bucket])
        for sub in ranked(report)
        for bucket in ("gained", "lost", "errors")
        if sub["examples"][bucket]
    ]
    return ["", "Example message ids:", *examples] if examples else []


def _fallback(report: dict[str, Any]) -> list[str]:
    if not report["python_fallback_rules"]:
        return []
    lines = ["", "Rules evaluated by a Python UDF (no native translation):"]
    return lines + [f"- `{r['topic']}/{r['subscription']}/{r['rule']}`: {r['reason']}" for r in report["python_fallback_rules"]]


def _fit(head: list[str], rows: list[str], sections: list[tuple[str, list[str]]], limit: int) -> str:
    """``head``, as many table ``rows`` as fit, then each whole section that fits; what is left out
    is named in a closing note, for which room is kept."""
    reserve = 400
    size = lambda lines: sum(len(line) + 1 for line in lines)  # noqa: E731
    out = list(head)
    used = size(out)
    kept_rows = 0
    for row in rows:
        if used + len(row) + 1 > limit - reserve:
            break
        out.append(row)
        used += len(row) + 1
        kept_rows += 1
    left_out = []
    if kept_rows < len(rows):
        left_out.append(f"{_plural(len(rows) - kept_rows, 'table row')} (unchanged or smallest changes)")
    for name, lines in sections:
        if not lines:
            continue
        if used + size(lines) > limit - reserve:
            left_out.append(name)
            continue
        out += lines
        used += size(lines)
    if left_out:
        out += ["", f"_Left out to stay within GitHub's comment size limit: {', '.join(left_out)}. "
                "The `--format json` and `--format html` reports have everything._"]
    return "\n".join(out)

