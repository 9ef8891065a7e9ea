"""Golden routing tests from real traffic (``sbrules test --record`` and ``--update``).

``record`` turns a traffic sample (the Parquet files ``sbrules sample`` writes) into test cases
that pin today's routing: each message is routed through the declared rules, messages are grouped
by outcome (topic, receivers, copies), and each outcome keeps at most N cases, the smallest
messages first, so that a change to the rules shows as failing cases with the messages affected.
``update`` rewrites the expectations of failing cases to what the rules do now, after review, as
snapshot-testing tools do: through ruamel.yaml's round trip, so the file keeps its comments, quotes,
indentation and flow or block style everywhere but in the expectations it replaces.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyarrow.parquet as pq
import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import SingleQuotedScalarString
from ruamel.yaml.util import load_yaml_guess_indent

from reconciler.model import DesiredState, Message
from reconciler.rulefiles.located import plain_tag
from reconciler.rulefiles.project import Environment
from reconciler.ruletests.run import CaseResult
from reconciler.sql import RouteResult
from reconciler.sql.router import TopicRouter, topic_router
from reconciler.sql.routing import RULE_NAME_PROPERTY
from reconciler.traffic.sample.rows import row_to_message


def sample_messages(sample: Path) -> Iterator[tuple[str, Message]]:
    """(topic as the namespace names it, message) of each row of a sample (a file or directory)."""
    for row in pq.read_table(sample).to_pylist():
        yield row["topic"], row_to_message(row)


def expectation(routed: dict[str, RouteResult], message: Message) -> dict[str, Any]:
    """The ``expect`` of a case that pins ``routed``: exactly its receivers, and each copy a rule's
    action made with the properties the action changed."""
    receivers = [name for name, result in routed.items() if result.delivered]
    if not receivers:
        return {"unrouted": True}
    expect: dict[str, Any] = {"only": receivers}
    copies: dict[str, list[dict[str, Any]]] = {}
    for name, result in routed.items():
        made = [_copy_doc(rule, copy, message) for rule, copy in result.copies if rule is not None]
        if made:
            plain = [{"rule": None}] if any(rule is None for rule, _ in result.copies) else []
            copies[name] = plain + made
    if copies:
        expect["copies"] = copies
    return expect


def _copy_doc(rule: str, copy: Message, original: Message) -> dict[str, Any]:
    doc: dict[str, Any] = {"rule": rule}
    for scope, now, before in (("sys", copy.sys, original.sys), ("user", copy.user, original.user)):
        changed = {
            k: v.to_typed_form(explicit=True) for k, v in now.items() if before.get(k) != v and k != RULE_NAME_PROPERTY
        }
        if changed:
            doc[scope] = changed
    return doc


def _routed(router: TopicRouter, message: Message) -> dict[str, RouteResult]:
    results = router.route(message)
    return {router.subscriptions[i][0]: result for i, result in sorted(results.items())}


def record(
    sample: Path, state: DesiredState, environment: Environment | None = None, per_outcome: int = 1
) -> dict[str, Any]:
    """The test-file document pinning how the rules route the sample's messages."""
    routers = {topic.name: topic_router(topic) for topic in state.topics}
    groups: dict[str, list[tuple[int, str, Message, dict[str, Any]]]] = defaultdict(list)
    for actual, message in sample_messages(sample):
        router = routers.get(actual)
        if router is None:
            continue
        topic = environment.declared_topic(actual) if environment is not None else actual
        expect = expectation(_routed(router, message), message)
        given = message.to_json()
        size = len(json.dumps(given, sort_keys=True, default=str))
        groups[json.dumps([topic, expect], sort_keys=True, default=str)].append((size, topic, message, expect))
    cases = []
    for key in sorted(groups):
        kept = sorted(groups[key], key=lambda entry: (entry[0], json.dumps(entry[2].to_json(), sort_keys=True, default=str)))
        for n, (_size, topic, message, expect) in enumerate(kept[:per_outcome], start=1):
            receivers = ", ".join(expect.get("only", ())) or "nobody"
            cases.append({
                "name": f"{topic} → {receivers}" + (f" #{n}" if n > 1 else ""),
                "topic": topic,
                "given": _given(message),
                "expect": expect,
            })
    return {"cases": cases}


def _given(message: Message) -> dict[str, Any]:
    doc = {
        "sys": {k: v.to_typed_form(explicit=True) for k, v in message.sys.items()},
        "user": {k: v.to_typed_form(explicit=True) for k, v in message.user.items()},
    }
    return {k: v for k, v in doc.items() if v}


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)


def update(results: Sequence[CaseResult]) -> list[Path]:
    """Rewrite the ``expect`` of each failed case to what the rules do now; the files rewritten.
    Everything else in the file stays as written (comments, quotes, layout); a new expectation
    takes the flow or block style of the one it replaces."""
    by_file: dict[Path, list[CaseResult]] = defaultdict(list)
    for result in results:
        pinned = result.findings or result.note.startswith("expected at least one")
        if result.status == "failed" and result.case.file is not None and pinned:
            by_file[result.case.file].append(result)
    for file, failed in by_file.items():
        text = file.read_text(encoding="utf-8")
        _doc, indent, offset = load_yaml_guess_indent(text)
        round_trip = YAML()
        round_trip.preserve_quotes = True
        round_trip.width = 4096  # never fold a line that was not touched
        mapping = indent - offset if indent and offset and indent > offset else (indent or 2)
        round_trip.indent(mapping=mapping, sequence=indent or 2, offset=offset or 0)
        doc = round_trip.load(text)
        for result in failed:
            case = doc["cases"][result.case.index]
            old = case.get("expect")
            flow = isinstance(old, (CommentedMap, CommentedSeq)) and bool(old.fa.flow_style())
            case["expect"] = _as_written(expectation(result.routed, result.case.message), flow)
        out = io.StringIO()
        round_trip.dump(doc, out)
        file.write_text(out.getvalue(), encoding="utf-8")
    return sorted(by_file)


def _as_written(value: Any, flow: bool) -> Any:
    """``value`` for the round trip: containers in flow style when ``flow``, and each string that
    YAML 1.1 (which sbrules reads) would take for something else in quotes (``'yes'``, ``'010'``)."""
    if isinstance(value, dict):
        mapping = CommentedMap((k, _as_written(v, flow)) for k, v in value.items())
        if flow:
            mapping.fa.set_flow_style()
        return mapping
    if isinstance(value, list):
        seq = CommentedSeq(_as_written(v, flow) for v in value)
        if flow:
            seq.fa.set_flow_style()
        return seq
    if isinstance(value, str) and plain_tag(value) != "tag:yaml.org,2002:str":
        return SingleQuotedScalarString(value)
    return value
