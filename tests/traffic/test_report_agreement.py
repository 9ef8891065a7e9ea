"""One plan, one sample, one set of numbers: `plan --traffic`, `impact PLAN.json` and `analyze
--live`, in every format they write, show the same messages, unrouted counts, credits and
receivers per topic (generated namespaces: a sampling tap, a fall-through subscription,
subscriptions the files do not name with rules known and unknown, a topic renamed under --env),
against the emulator; and `sbrules show` of each one's saved JSON prints what the command printed."""

from __future__ import annotations

import json
import random
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from reconciler import model
from reconciler.model import CorrelationFilter, Rule, SqlFilter, TrueFilter, TypedValue

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PROJECT = """\
environments:
  prod:
    connection_string_env: SB_AGREEMENT
    topics: {orders: orders-v2}
"""
REGIONS = ["eu", "us", "uk", "fr", "EU"]
LABELS = ["order", "refund", "ping"]

#: Per topic: messages, unrouted, credits per message, whether exact, and each subscription the
#: files do not name with what it receives (None: unknown).
Numbers = dict[str, dict[str, Any]]


def _filter(rng: random.Random) -> Any:
    region, label = rng.choice(REGIONS), rng.choice(LABELS)
    return rng.choice([
        SqlFilter(f"region = '{region}'"),
        SqlFilter(f"amount > {rng.randint(10, 90)}"),
        SqlFilter(f"sys.Label = '{label}' AND region <> '{region}'"),
        CorrelationFilter(subject=label),
        CorrelationFilter(properties={"region": region}),
    ])


def _rules(rng: random.Random, prefix: str, count: int) -> tuple[Rule, ...]:
    return tuple(Rule(f"{prefix}{i}", _filter(rng)) for i in range(count))


def _yaml_rules(rules: tuple[Rule, ...]) -> str:
    return json.dumps([model.rule_to_doc(rule) for rule in rules])


def _scenario(rng: random.Random, root: Path) -> model.DesiredState:
    """The rule files under ``root``/rules and the namespace they drift from (namespace names)."""
    eu, us, big = _rules(rng, "eu", rng.randint(1, 3)), _rules(rng, "us", rng.randint(1, 2)), _rules(rng, "big", 2)
    (root / "rules").mkdir()
    (root / "rules" / "sbrules.yaml").write_text(PROJECT)
    (root / "rules" / "orders.yaml").write_text(
        "topic: orders\nsubscriptions:\n"
        "  audit: {sampling_tap: true, rules: [{name: all, filter: true}]}\n"
        f"  eu: {{rules: {_yaml_rules(eu)}}}\n  us: {{rules: {_yaml_rules(us)}}}\n"
        "  rest: {fallthrough: true}\n"
    )
    (root / "rules" / "payments.yaml").write_text(
        "topic: payments\nsubscriptions:\n"
        "  all: {sampling_tap: true, rules: [{name: all, filter: true}]}\n"
        f"  big: {{rules: {_yaml_rules(big)}}}\n  legacy: {{}}\n"
    )
    every = (Rule("all", TrueFilter()),)
    return model.DesiredState(topics=(
        model.Topic("orders-v2", (
            model.Subscription("audit", every), model.Subscription("eu", _rules(rng, "old", 2)),
            model.Subscription("us", us), model.Subscription("rest", (Rule("$Default", TrueFilter()),)),
            model.Subscription("extra", _rules(rng, "x", rng.randint(1, 2))),
        )),
        model.Topic("payments", (
            model.Subscription("all", every), model.Subscription("big", big[:1]),
            model.Subscription("legacy", _rules(rng, "l", 1)), model.Subscription("ghost", _rules(rng, "g", 2)),
        )),
    ))


def _messages(rng: random.Random, count: int) -> list[model.Message]:
    out = []
    for i in range(count):
        user = {"region": TypedValue.infer(rng.choice(REGIONS)), "amount": TypedValue.infer(rng.randint(1, 100))}
        if rng.random() < 0.2:
            del user["region"]
        out.append(model.Message(
            sys={"MessageId": TypedValue.infer(f"m{i % 17}"), "Label": TypedValue.infer(rng.choice(LABELS))}, user=user
        ))
    return out


# -- the numbers each format shows -------------------------------------------------------------------


def _from_json(section: dict) -> Numbers:
    return {
        t["topic"]: {
            "messages": t["messages"], "unrouted": t["unrouted"]["count"], "credits": t["credits"]["per_message"],
            "exact": t["credits"]["exact"],
            "undeclared": {b["subscription"]: b["receives"] for b in t["undeclared_subscriptions"]},
        }
        for t in section["topics"]
    }


TEXT_TOPIC = re.compile(r"^(\S+)(?: \(\S+ in the namespace\))?: ([\d,]+) sampled messages$")


def _from_text(text: str) -> Numbers:
    out: Numbers = {}
    current: dict[str, Any] = {}
    for line in text.splitlines():
        if found := TEXT_TOPIC.match(line):
            current = out[found[1]] = {"messages": _n(found[2]), "undeclared": {}}
        elif found := re.match(r"^  unrouted: ([\d,]+) \(", line):
            current["unrouted"] = _n(found[1])
        elif found := re.match(r"^  credits: (at least )?(\d+) credits per message", line):
            current["credits"], current["exact"] = int(found[2]), not found[1]
        elif line.startswith("  not in the rule files: "):
            current["undeclared"] = _bystanders(line.removeprefix("  not in the rule files: "), r"(\S+)")
    return out


def _bystanders(text: str, name: str) -> dict[str, int | None]:
    found = re.findall(name + r" \((unknown|receives [\d,]+)\)", text)
    return {sub: None if what == "unknown" else _n(what.removeprefix("receives ")) for sub, what in found}


def _from_markdown(text: str) -> Numbers:
    out: Numbers = {}
    for found in re.finditer(r"^\| `([^`]+)`(?: \(`[^`]+` in the namespace\))? \| ([\d,]+) \| ([\d,]+) \([\d.]+%\) \|[^|]*\| (≥ )?(\d+) \|",
                             text, re.M):
        out[found[1]] = {"messages": _n(found[2]), "unrouted": _n(found[3]), "credits": int(found[5]),
                         "exact": not found[4], "undeclared": {}}
    line = re.search(r"^Not in the rule files: (.*)\.$", text, re.M)
    for topic, sub, what in re.findall(r"`([^`/]+)/([^`]+)` \((unknown|receives [\d,]+)\)", line[1] if line else ""):
        out[topic]["undeclared"][sub] = None if what == "unknown" else _n(what.removeprefix("receives "))
    return out


class _Fields(HTMLParser):
    """The data-* numbers of a report page: per topic row, per bystander, and the headline."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.numbers: Numbers = {}
        self.headline: int | None = None
        self._topic: str | None = None
        self._field: tuple[str, dict] | None = None
        self._bystanders: list[tuple[str, str]] = []
        self._article: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "tr" and "data-topic" in a:
            self._topic = a["data-topic"]
            self.numbers.setdefault(self._topic, {"undeclared": {}})
        if tag == "article" and "data-topic" in a:
            self._article = a["data-topic"]
        if "data-field" in a:
            self._field = (a["data-field"], a)
        if "data-bystander" in a and self._article is not None:
            receives = a["data-receives"]
            self.numbers[self._article]["undeclared"][a["data-bystander"]] = None if receives == "unknown" else int(receives)

    def handle_data(self, data: str) -> None:
        if self._field is None or not data.strip():
            return
        name, attrs = self._field
        self._field = None
        if name not in ("messages", "unrouted", "credits"):
            return
        value = _n(data.strip().removeprefix("≥ ").split()[0])
        if self._topic is not None:
            self.numbers[self._topic][name] = value
            if name == "credits":
                self.numbers[self._topic]["exact"] = attrs["data-exact"] == "true"
        elif name == "unrouted" and self.headline is None:
            self.headline = value

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._topic = None


def _n(text: str) -> int:
    return int(text.replace(",", ""))


def _headline(text: str, fmt: str) -> int:
    pattern = {"text": r"^Unrouted \([^)]*\): ([\d,]+)", "markdown": r"\*\*Unrouted\*\* \([^)]*\): ([\d,]+)"}[fmt]
    found = re.search(pattern, text, re.M)
    assert found, text
    return _n(found[1])


# -- the test ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_every_command_and_format_shows_the_same_numbers(seed, spark, run_cli, monkeypatch, tmp_path, output_schema):
    from reconciler.emulator import Emulator

    rng = random.Random(seed)
    namespace = _scenario(rng, tmp_path)
    monkeypatch.chdir(tmp_path)
    with Emulator(namespace) as emu:
        monkeypatch.setenv("SB_AGREEMENT", emu.connection_string)
        emu.publish("orders-v2", _messages(rng, rng.randint(40, 70)))
        emu.publish("payments", _messages(rng, rng.randint(20, 40)))
        env = ["--env", "prod"]
        for topic, tap in (("orders", "audit"), ("payments", "all")):
            code, _, err = run_cli("sample", *env, "--topic", topic, "--subscription", tap, "--out", "sample")
            assert code == 0, err

        def run(*args: str) -> str:
            code, out, err = run_cli(*args)
            assert code == 0, err
            return out

        def page(*args: str) -> str:
            run(*args, "--format", "html", "--out", "page.html")
            return Path("page.html").read_text(encoding="utf-8")

        # A: the plan read with --traffic, and the same plan saved: every format of both.
        printed = run("plan", "rules", *env, "--traffic", "sample", "--out", "plan.json", "--format", "json")
        doc = json.loads(printed)
        output_schema("plan").validate(doc)
        expected = _from_json(doc["traffic"]["routing_health"])
        assert expected["orders"]["undeclared"].keys() == {"extra"} and expected["payments"]["undeclared"].keys() == {"ghost"}
        assert all(v is not None for t in expected.values() for v in t["undeclared"].values())
        assert all(t["exact"] for t in expected.values())  # discovery listed every subscription, all rules read
        headline = doc["traffic"]["unrouted"]
        assert headline == sum(t["unrouted"] for t in expected.values())
        assert {t["topic"]: t["unrouted"] for t in doc["traffic"]["topics"]} == {k: v["unrouted"] for k, v in expected.items()}
        _same_movement(doc["traffic"], run("plan", "rules", *env, "--traffic", "sample", "--format", "markdown"))
        Path("printed.json").write_text(printed, encoding="utf-8")
        assert run("show", "printed.json", "--format", "json") == printed
        for fmt in ("text", "markdown"):
            shown = run("plan", "rules", *env, "--traffic", "sample", "--format", fmt)
            assert _parse(shown, fmt) == expected, fmt
            assert _headline(shown, fmt) == headline
            assert _read_now(run("show", "printed.json", "--format", fmt)) == _read_now(shown)
        saved = run("impact", "plan.json", "rules", "--traffic", "sample", "--format", "json")
        report = json.loads(saved)
        assert _from_json(report["routing_health"]) == expected and report["unrouted"] == headline
        _check_formats(run, page, ["impact", "plan.json", "rules", "--traffic", "sample"], expected, headline, saved)

        # B: a plan saved without --traffic read no rules of payments' bystanders: unknown, at least N.
        run("plan", "rules", *env, "--out", "plain.json")
        saved = run("impact", "plain.json", "rules", "--traffic", "sample", "--format", "json")
        plain = json.loads(saved)
        unknown = _from_json(plain["routing_health"])
        assert unknown["payments"]["undeclared"] == {"ghost": None} and unknown["payments"]["exact"] is False
        assert unknown["orders"] == expected["orders"]  # its fall-through made the plan read extra's rules
        command = ["impact", "plain.json", "rules", "--traffic", "sample"]
        _check_formats(run, page, command, unknown, plain["unrouted"], saved)

        # C: applied, the live rules are the declared ones: analyze --live agrees with the plan's report.
        run("apply", "plan.json", *env)
        synced = json.loads(run("plan", "rules", *env, "--traffic", "sample", "--format", "json"))
        assert synced["summary"]["create"] + synced["summary"]["replace"] + synced["summary"]["delete"] == 0
        assert _from_json(synced["traffic"]["routing_health"]) == expected
        live = ["analyze", "rules", *env, "--traffic", "sample", "--live"]
        saved = run(*live, "--format", "json")
        analysis = json.loads(saved)
        output_schema("analyze").validate(analysis)
        assert _from_json(analysis) == expected
        _check_formats(run, page, live, expected, headline, saved)


def _parse(text: str, fmt: str) -> Numbers:
    return {"text": _from_text, "markdown": _from_markdown}[fmt](text)


def _check_formats(run, page, command: list[str], expected: Numbers, headline: int, saved: str) -> None:
    """Every format of ``command`` shows the numbers; and ``sbrules show`` of its JSON (``saved``)
    prints exactly what the command printed, in every format."""
    Path("saved.json").write_text(saved, encoding="utf-8")
    assert run("show", "saved.json", "--format", "json") == saved
    for fmt in ("text", "markdown"):
        shown = run(*command, "--format", fmt)
        assert _parse(shown, fmt) == expected, (fmt, shown)
        if command[0] == "impact":
            assert _headline(shown, fmt) == headline
        assert run("show", "saved.json", "--format", fmt) == shown
    html = page(*command)
    fields = _Fields(html)
    assert fields.numbers == expected
    assert fields.headline == headline
    assert page("show", "saved.json") == html


def _read_now(plan_output: str) -> str:
    """A plan's output without how long ago each live rule was created, which it counts from when
    that run read the namespace."""
    return re.sub(r"created \d+ (s|min|h|days?) ago", "created … ago", plan_output)


def _same_movement(traffic: dict, markdown: str) -> None:
    """The Mermaid chart's bars are the JSON's delivered before and after of the changed subscriptions."""
    changed = [s for s in traffic["subscriptions"] if s["gained"] or s["lost"]]
    bars = re.findall(r"^    bar \[([^\]]*)\]", markdown, re.M)
    if not changed:
        assert not bars
        return
    before, after, _ = ([int(v) for v in bar.split(", ")] for bar in bars)
    assert sorted(before[0::2]) == sorted(s["delivered_before"] for s in changed)
    assert sorted(after[1::2]) == sorted(s["delivered"] for s in changed)
