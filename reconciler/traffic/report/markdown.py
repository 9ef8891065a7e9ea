"""The impact report as a pull-request comment: a verdict, a Mermaid chart, the table, then detail
sections while the comment stays under GitHub's size limit (the JSON and HTML reports carry everything)."""

from __future__ import annotations

from reconciler.traffic.report.health import section_markdown
from reconciler.traffic.report.mermaid import movement_chart
from reconciler.traffic.report.model import UNROUTED_MEANS, ImpactReport
from reconciler.traffic.report.parts import plural
from reconciler.traffic.report.text import for_example, signed

#: GitHub refuses a comment body longer than this many characters.
GITHUB_COMMENT_LIMIT = 65_536
#: Changed subscriptions drawn in the pull-request chart; the rest are summed up under it.
MARKDOWN_CHART_ROWS = 12


def render_markdown(report: ImpactReport) -> str:
    """Verdict, chart and table always; the detail sections while the comment fits."""
    span = report.time_range.span
    head = [
        "### Traffic impact",
        "",
        f"**{report.verdict}**",
        "",
        f"{report.messages:,} sampled messages{' (' + span + ')' if span else ''}, compared with {report.compared_with}. "
        f"**Unrouted** ({UNROUTED_MEANS}): {report.unrouted:,}{for_example(report.unrouted_examples)}.",
    ]
    moves = report.changed()
    if moves:
        head += ["", *movement_chart(moves, MARKDOWN_CHART_ROWS)]
    unchanged = len(report.subscriptions) - len(moves)
    notes = []
    if len(moves) > MARKDOWN_CHART_ROWS:
        rest = moves[MARKDOWN_CHART_ROWS:]
        notes.append(
            f"{plural(len(rest), 'more changed subscription')} not drawn: +{sum(m.gained for m in rest):,} "
            f"−{sum(m.lost for m in rest):,} messages in all (largest: `{rest[0].path}` {rest[0].movement})."
        )
    if moves and unchanged:
        notes.append(f"{plural(unchanged, 'subscription')} unchanged.")
    if notes:
        head += ["", "<sub>" + " ".join(notes) + "</sub>"]

    table_head = ["", "| subscription | delivered | before | gained | lost | errors |", "|---|---:|---:|---:|---:|---:|"]
    table = [
        f"| `{sub.path}` | {sub.delivered:,} | {sub.delivered_before:,} | "
        f"{signed(sub.gained, '+')} | {signed(sub.lost, '-')} | {sub.errors:,} |"
        for sub in report.ranked()
    ]
    sections = [
        ("routing health", _routing_health(report)),
        ("per-rule counts", _per_rule(report)),
        ("example message ids", _examples(report)),
        ("rules evaluated in Python", _fallback(report)),
    ]
    return _fit(head + table_head, table, sections, GITHUB_COMMENT_LIMIT)


def _routing_health(report: ImpactReport) -> list[str]:
    if report.routing_health is None:
        return []
    return ["", "#### Routing health", "", *section_markdown(report.routing_health).splitlines()]


def _per_rule(report: ImpactReport) -> list[str]:
    lines = ["", "<details><summary>Per rule</summary>", "", "| subscription | rule | matched | errors |", "|---|---|---:|---:|"]
    for sub in report.ranked():
        for rule in sub.rules:
            flag = " ⚠️ never matches" if rule.matched == 0 else ""
            flag += " (python fallback)" if rule.python else ""
            lines.append(f"| `{sub.path}` | `{rule.name}`{flag} | {rule.matched:,} | {rule.errors:,} |")
    return lines + ["", "</details>"]


def _examples(report: ImpactReport) -> list[str]:
    examples = [
        f"- `{sub.path}` {bucket}: " + ", ".join(f"`{x}`" for x in ids)
        for sub in report.ranked()
        for bucket, ids in sub.examples.buckets()
    ]
    return ["", "Example message ids:", *examples] if examples else []


def _fallback(report: ImpactReport) -> list[str]:
    if not report.python_fallback_rules:
        return []
    lines = ["", "Rules evaluated by a Python UDF (no native translation):"]
    return lines + [f"- `{r.path}`: {r.reason}" for r in report.python_fallback_rules]


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
        left_out.append(f"{plural(len(rows) - kept_rows, 'table row')} (unchanged or smallest changes)")
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
