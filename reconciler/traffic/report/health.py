"""Render routing health as text and Markdown: the ``sbrules analyze`` document, and the "Routing
health" section of the traffic impact report (:mod:`reconciler.traffic.report.routing` values).
The section renderers take the part both documents share: a
:class:`~reconciler.traffic.report.routing.RoutingHealth`; the HTML page is
:mod:`~reconciler.traffic.report.html`'s, and :mod:`~reconciler.traffic.report.render` picks the format.
"""

from __future__ import annotations

from reconciler.traffic.report.routing import Analysis, Credits, Group, Quota, RoutingHealth, TopicHealth


def analysis_text(doc: Analysis) -> str:
    """The ``sbrules analyze`` document for a terminal."""
    return "\n".join([f"Routing health of the {doc.health.source} rules", doc.sample_line, "", section_text(doc.health)])


def analysis_markdown(doc: Analysis) -> str:
    """The ``sbrules analyze`` document as a pull-request comment."""
    return "\n".join(
        [f"## Routing health ({doc.health.source} rules)", "", doc.sample_line, "", section_markdown(doc.health)]
    )


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%"


def _groups(groups: tuple[Group, ...]) -> str:
    return ", ".join(f"{g.value!r} {g.count:,}" for g in groups) or "none set"


def _credits(credits: Credits) -> str:
    known = "" if credits.exact else " known filters, plus any it does not know"
    text = f"{credits.amount} per message sent (1 + {credits.filters}{known or ' filters'})"
    if credits.filters_before is not None and credits.filters_before != credits.filters:
        text += f", {credits.per_message_before} before this change (1 + {credits.filters_before} filters)"
    return f"{text}; {credits.rate}"


def _undeclared(topic: TopicHealth) -> str:
    """The topic's subscriptions the files do not name, each with what it receives."""
    return ", ".join(b.shown for b in topic.undeclared)


def _quota(quota: Quota) -> str:
    return (
        f"{quota.sql_filters:,} of {quota.sql_limit:,} SQL filters, "
        f"{quota.correlation_filters:,} of {quota.correlation_limit:,} correlation filters"
    )


def section_text(section: RoutingHealth) -> str:
    """Per topic: unrouted messages, credits and quota; then the findings, one a line."""
    lines: list[str] = []
    for topic in section.topics:
        unrouted = topic.unrouted
        lines.append(f"{topic.title}: {topic.messages:,} sampled messages")
        lines.append(
            f"  unrouted: {unrouted.count:,} ({_percent(unrouted.share)}) reach no subscription"
            + (f", e.g. {', '.join(unrouted.examples)}" if unrouted.examples else "")
        )
        if unrouted.count:
            lines.append(f"    by sys.Label: {_groups(unrouted.by.get('label', ()))}")
            lines.append(f"    by sys.To: {_groups(unrouted.by.get('to', ()))}")
        for subscription, reason in topic.not_receiving:
            lines.append(f"  not counted as receiving: {subscription} ({reason})")
        if topic.undeclared:
            lines.append(f"  not in the rule files: {_undeclared(topic)}")
        if topic.unknown_subscriptions:
            lines.append(
                f"  unknown rules (not managed by the files): {', '.join(topic.unknown_subscriptions)}; "
                "they may receive some of the unrouted messages"
            )
        lines.append(f"  credits: {_credits(topic.credits)}")
        lines.append(f"  quota: {_quota(topic.quota)}")
    findings = section.findings
    lines.append("")
    lines.append(f"{len(findings)} finding{'s' if len(findings) != 1 else ''}" + (":" if findings else ""))
    for finding in findings:
        lines.append(f"  {finding.severity}[{finding.code}] {finding.where}: {finding.message}")
        if finding.suggestion:
            lines.append(f"    suggested rule: {finding.suggestion}")
    return "\n".join(lines)


def section_markdown(section: RoutingHealth) -> str:
    """A table of the topics and a list of the findings (a pull-request comment's section)."""
    lines = [
        "| Topic | Messages | Unrouted | Top sys.Label of unrouted | Credits / message | SQL filters | Correlation filters |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for topic in section.topics:
        unrouted, quota = topic.unrouted, topic.quota
        shown = f"`{topic.topic}`" + (f" (`{topic.namespace_topic}` in the namespace)" if topic.namespace_topic else "")
        lines.append(
            f"| {shown} | {topic.messages:,} | {unrouted.count:,} ({_percent(unrouted.share)}) "
            f"| {_groups(unrouted.by.get('label', ())[:3]) if unrouted.count else ''} "
            f"| {'' if topic.credits.exact else '≥ '}{topic.credits.per_message} "
            f"| {quota.sql_filters:,} / {quota.sql_limit:,} "
            f"| {quota.correlation_filters:,} / {quota.correlation_limit:,} |"
        )
    unknown = [f"`{t.topic}/{s}`" for t in section.topics for s in t.unknown_subscriptions]
    if unknown:
        lines += ["", f"Rules unknown (not managed by the files): {', '.join(unknown)}."]
    undeclared = [f"`{t.topic}/{b.subscription}` {b.shown.removeprefix(b.subscription).strip()}"
                  for t in section.topics for b in t.undeclared]
    if undeclared:
        lines += ["", f"Not in the rule files: {', '.join(undeclared)}."]
    for topic in section.topics:
        if not topic.credits.exact or topic.credits.burst:
            lines += ["", f"Credits of `{topic.topic}`: {_credits(topic.credits)}."]
    lines.append("")
    if not section.findings:
        lines.append("No findings.")
    for finding in section.findings:
        lines.append(f"- **{finding.code}** `{finding.where}`: {finding.message}")
        if finding.suggestion:
            lines.append(f"  suggested rule: `{finding.suggestion}`")
    return "\n".join(lines)
