"""``sbrules analyze``: the routing-health document of some subscriptions, measured by the impact
report's one pass over a traffic sample (:func:`reconciler.traffic.analysis.impact.on_sample`) with no
impact to report, only the questions of :class:`reconciler.traffic.analysis.health.Health`."""

from __future__ import annotations

from typing import Any, Sequence

from reconciler.names import name_key
from reconciler.traffic.analysis.health import Health, Subscriber
from reconciler.traffic.analysis.impact import ImpactError, _evaluate, on_sample
from reconciler.traffic.report.model import ImpactReport
from reconciler.traffic.report.parts import Naming, as_declared
from reconciler.traffic.report.routing import Analysis
from reconciler.traffic.spark import failures


def analyze_report(
    subscribers: Sequence[Subscriber],
    source: str,
    dataset: str,
    spark_master: str | None = None,
    declared: Naming = as_declared,
    *,
    complete: bool = False,
) -> Analysis:
    """The routing health of ``subscribers`` over the sample ``dataset`` (one Spark pass); topics
    named by ``declared`` (see :func:`reconciler.traffic.analysis.impact.impact_report`); ``complete``: they
    are every subscription of their topics (see :class:`Health`)."""
    messages = failures.check_sample(dataset)
    skipped: list[str] = []

    def evaluate(frame: Any, types: Any, topics: frozenset[str]) -> ImpactReport:
        sampled = {name_key(topic) for topic in topics}
        kept = [s for s in subscribers if name_key(s.topic) in sampled]
        skipped.extend(sorted({declared(s.topic) for s in subscribers if name_key(s.topic) not in sampled}))
        if not kept:
            listed = ", ".join(sorted({declared(s.topic) for s in subscribers}))
            raise ImpactError(f"the sample holds no messages of the declared topics ({listed}); sample them first")
        return _evaluate(frame, [], types, lambda found: Health(kept, source, dict(found), complete=complete), declared)

    filters = {rule.filter for s in subscribers for rule in s.rules or ()}
    evaluations = None if messages is None else messages * max(len(filters), 1)
    report = on_sample(dataset, spark_master, evaluations, evaluate, messages=messages)
    assert report.routing_health is not None  # the evaluation above always asks for it
    return Analysis(str(dataset), report.routing_health, report.time_range, tuple(skipped), report.example_messages)
