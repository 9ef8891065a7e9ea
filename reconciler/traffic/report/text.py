"""The impact report for a terminal: the verdict, a table of the subscriptions, then each one's rules."""

from __future__ import annotations

from reconciler.traffic.report.health import section_text
from reconciler.traffic.report.model import UNROUTED_MEANS, ImpactReport


def signed(n: int, sign: str) -> str:
    """``+25``, ``-3``, or ``0``."""
    return f"{sign}{n:,}" if n else "0"


def for_example(ids: tuple[str, ...]) -> str:
    return f" (e.g. {', '.join(ids)})" if ids else ""


def render_text(report: ImpactReport) -> str:
    span = report.time_range.span
    lines = [
        f"Traffic impact on {report.messages:,} sampled messages ({report.dataset}"
        f"{', ' + span if span else ''}), compared with {report.compared_with}",
        report.verdict,
        "",
    ]
    header = ("SUBSCRIPTION", "DELIVERED", "BEFORE", "GAINED", "LOST", "ERRORS")
    rows = [header]
    for sub in report.subscriptions:
        rows.append(
            (
                sub.path, f"{sub.delivered:,}", f"{sub.delivered_before:,}", signed(sub.gained, "+"), signed(sub.lost, "-"),
                f"{sub.errors:,}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(r[0].ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    lines.append("")
    lines.append(f"Unrouted ({UNROUTED_MEANS}): {report.unrouted:,}{for_example(report.unrouted_examples)}")
    for sub in report.subscriptions:
        lines.append("")
        renamed = f"{sub.namespace_topic} in the namespace; " if sub.namespace_topic else ""
        lines.append(f"{sub.path} ({renamed}current rules: {sub.current_rules})")
        width = max((len(r.name) for r in sub.rules), default=4)
        for rule in sub.rules:
            note = "  never matches" if rule.matched == 0 else ""
            note += "  [python fallback]" if rule.python else ""
            lines.append(f"  {rule.name.ljust(width)}  matched {rule.matched:>9,}  errors {rule.errors:>7,}{note}")
        for bucket, ids in sub.examples.buckets():
            lines.append(f"  {bucket} e.g. {', '.join(ids)}")
    if report.python_fallback_rules:
        lines.append("")
        lines.append("Evaluated by a Python UDF (no native Spark translation; slower):")
        for fallback in report.python_fallback_rules:
            lines.append(f"  {fallback.path}: {fallback.reason}")
    for skip in report.skipped:
        lines.append(f"skipped {skip.topic}/{skip.subscription}: {skip.reason}")
    if report.routing_health is not None:
        lines += ["", "Routing health of the declared rules", section_text(report.routing_health)]
    return "\n".join(lines)
