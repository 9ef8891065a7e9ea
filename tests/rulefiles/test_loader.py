"""rulefiles.load: the rule-file format, merging, and every located error class."""

from __future__ import annotations

import pytest

from reconciler import rulefiles
from reconciler.model import (
    CorrelationFilter,
    FalseFilter,
    SqlFilter,
    SqlRuleAction,
    TrueFilter,
    TypedValue,
    ValueType,
)

ISSUE_EXAMPLE = """
topic: orders
subscriptions:
  billing:
    rules:
      - name: high-value
        sql: "amount > 1000 AND currency = 'EUR'"
        action: "SET sys.Label = 'priority'"
      - name: refunds
        correlation: {subject: refund, properties: {tier: {int: 3}, region: eu}}
      - {name: $Default, filter: true}
  audit: {}            # no `rules:` key: not managed here
"""

FLOW_EXAMPLE = """
{topic: orders, subscriptions: {billing: {rules: [
  {name: high-value, sql: "amount > 1000 AND currency = 'EUR'", action: "SET sys.Label = 'priority'"},
  {name: refunds, correlation: {subject: refund, properties: {tier: {int: 3}, region: eu}}},
  {name: $Default, filter: true}]}, audit: {}}}
"""


def errors(result: rulefiles.LoadResult) -> list[tuple[str, int, int, str]]:
    return sorted(
        (d.origin.file.rsplit("/", 1)[-1], d.origin.line, d.origin.column, d.code)
        for d in result.diagnostics
        if d.severity == "error"
    )


@pytest.mark.unit
@pytest.mark.parametrize("text", [ISSUE_EXAMPLE, FLOW_EXAMPLE], ids=["block", "flow"])
def test_issue_example_is_accepted_as_written(write, text):
    state = rulefiles.load_paths([write("orders.yaml", text)])
    topic = state.topic("orders")
    billing = topic.subscription("billing")
    assert [r.name for r in billing.rules] == ["high-value", "refunds", "$Default"]
    high, refunds, default = billing.rules
    assert high.filter == SqlFilter("amount > 1000 AND currency = 'EUR'")
    assert high.action == SqlRuleAction("SET sys.Label = 'priority'")
    assert refunds.filter == CorrelationFilter(
        subject="refund", properties={"tier": TypedValue(ValueType.INT, 3), "region": TypedValue(ValueType.STRING, "eu")}
    )
    assert default.filter == TrueFilter()
    assert topic.subscription("audit").rules is None


@pytest.mark.unit
def test_typed_values_keep_their_amqp_type(write):
    path = write(
        "t.yaml",
        """
        topic: t
        subscriptions:
          s:
            rules:
              - name: r
                correlation:
                  label: x
                  properties:
                    a: {int: 3}
                    b: {long: 3}
                    c: 3
                    d: 1.5
                    e: {double: 2}
                    f: {string: '3'}
                    g: {bool: true}
                    h: {uuid: 6f1d3b8e-52a5-4a43-9ad6-3d7d8f0f1a2b}
                    i: {timestamp: 2026-01-01T00:00:00Z}
                    j: null
                    k: false
              - {name: never, filter: false}
        """,
    )
    rule = rulefiles.load_paths([path]).topic("t").subscription("s").rules[0]
    props = rule.filter.property_map
    assert rule.filter.subject == "x"  # label is an alias of subject
    assert {k: v.type.value for k, v in props.items()} == {
        "a": "int", "b": "long", "c": "long", "d": "double", "e": "double", "f": "string",
        "g": "bool", "h": "uuid", "i": "timestamp", "j": "null", "k": "bool",
    }
    assert props["a"] != props["b"]  # int 3 is not long 3
    assert rulefiles.load_paths([path]).topic("t").subscription("s").rules[1].filter == FalseFilter()


@pytest.mark.unit
def test_directory_is_merged_and_hidden_files_skipped(write, tmp_path):
    write("a.yaml", "topic: orders\nsubscriptions:\n  billing:\n    rules:\n      - {name: r, filter: true}\n")
    write("sub/b.yml", "topic: Orders\nsubscriptions:\n  shipping: {}\n")
    write(".hidden/c.yaml", "not: [valid")
    write("notes.txt", "ignored")
    state = rulefiles.load_paths([tmp_path])
    assert [t.name for t in state.topics] == ["orders"]
    assert [s.name for s in state.topics[0].subscriptions] == ["billing", "shipping"]


@pytest.mark.unit
def test_malformed_yaml_is_located(write):
    path = write("bad.yaml", "topic: orders\nsubscriptions:\n  billing: [unclosed\n")
    result = rulefiles.load([path])
    assert errors(result) == [("bad.yaml", 4, 1, "yaml")]
    assert "malformed YAML" in result.diagnostics[0].message


@pytest.mark.unit
def test_every_schema_violation_is_reported(write):
    path = write(
        "s.yaml",
        """
        topic: orders
        colour: blue
        subscriptions:
          billing:
            rules:
              - name: a
                sql: 1=1
                bogus: 3
              - name: b
                correlation: {subject: x, properties: {tier: {int: 99999999999}, r: {colour: 1}}}
              - name: c
                sql: "a = 1"
                filter: true
              - name: d
              - sql: "x = 1"
              - name: e
                filter: maybe
          shipping:
            rules: []
            extra: 1
        """,
    )
    result = rulefiles.load([path])
    assert errors(result) == [
        ("s.yaml", 2, 1, "unknown-key"),
        ("s.yaml", 8, 9, "unknown-key"),
        ("s.yaml", 10, 54, "typed-value"),
        ("s.yaml", 10, 77, "typed-value"),
        ("s.yaml", 11, 9, "filter-kind"),
        ("s.yaml", 14, 9, "filter-kind"),
        ("s.yaml", 15, 9, "missing-key"),
        ("s.yaml", 17, 17, "type"),
        ("s.yaml", 20, 5, "unknown-key"),
    ]
    messages = " | ".join(d.message for d in result.diagnostics)
    assert "unknown key 'colour'" in messages
    assert "use {long: 99999999999}" in messages
    assert "unknown value type 'colour'" in messages
    assert "needs exactly one of sql, correlation, filter (it has sql, filter)" in messages
    assert "must be true or false, not the string 'maybe'" in messages


@pytest.mark.unit
@pytest.mark.parametrize(
    "rule",
    ['{name: both, sql: "a = 1", filter: true}', "{name: none, action: SET a = 1}", "{name: three, sql: x, filter: true, correlation: {to: a}}"],
)
def test_a_rule_without_exactly_one_filter_kind_is_the_only_fault_found(write, rule):
    """The fast schema check tests the rule's oneOf by hand: a file whose only fault is there is still invalid."""
    path = write(
        "k.yaml",
        f"""
        topic: orders
        subscriptions:
          empty:
          billing:
            rules:
              - {{name: fine, sql: "a = 1"}}
              - {rule}
        """,
    )
    assert errors(rulefiles.load([path])) == [("k.yaml", 7, 9, "filter-kind")]


@pytest.mark.unit
def test_duplicates_name_both_locations(write, tmp_path):
    write(
        "a.yaml",
        """
        topic: orders
        subscriptions:
          billing:
            rules:
              - {name: r1, filter: true}
              - {name: R1, filter: false}
        """,
    )
    write("b.yaml", "topic: orders\nsubscriptions:\n  Billing: {}\n")
    result = rulefiles.load([tmp_path])
    found = {d.code: d for d in result.diagnostics}
    dup_rule = found["duplicate-rule"]
    assert (dup_rule.origin.line, dup_rule.origin.column) == (6, 9)
    assert [(o.line, o.column) for o in dup_rule.related] == [(5, 9)]
    dup_sub = found["duplicate-subscription"]
    assert dup_sub.origin.file.endswith("b.yaml") and dup_sub.origin.line == 3
    assert dup_sub.related[0].file.endswith("a.yaml") and dup_sub.related[0].line == 3
    with pytest.raises(rulefiles.RuleFileErrors) as raised:
        rulefiles.load_paths([tmp_path])
    assert "declared twice" in str(raised.value)


@pytest.mark.unit
def test_duplicate_key_in_one_mapping(write):
    path = write("d.yaml", "topic: a\ntopic: b\n")
    result = rulefiles.load([path])
    (diag,) = result.diagnostics
    assert (diag.code, diag.origin.line, diag.related[0].line) == ("duplicate-key", 2, 1)


@pytest.mark.unit
@pytest.mark.parametrize(
    "content, code, line",
    [
        (b"topic: \xff\xfe\n", "encoding", 1),
        (b"", "empty", 1),
        (b"# only a comment\n", "empty", 1),
        (b"topic: a\n---\ntopic: b\n", "multi-document", 3),
        (b"- just\n- a list\n", "type", 1),
        (b"topic: !!binary aGVsbG8=\n", "yaml", 1),
        (b"subscriptions: {}\n", "missing-key", 1),
    ],
)
def test_other_file_level_errors(write, content, code, line):
    result = rulefiles.load([write("x.yaml", content)])
    assert [(d.code, d.origin.line) for d in result.diagnostics] == [(code, line)]


@pytest.mark.slow
def test_alias_bomb_is_refused(write):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]" for i in range(1, 9)]
    result = rulefiles.load([write("bomb.yaml", "\n".join(lines) + "\n")])
    assert [d.code for d in result.diagnostics] == ["yaml"]


@pytest.mark.unit
def test_no_rule_files_is_an_error(tmp_path):
    result = rulefiles.load([tmp_path])
    assert [d.code for d in result.diagnostics] == ["no-files"]


def test_every_property_type_has_one_spelling_in_rule_files(write):
    path = write(
        "types.yaml",
        """
        topic: orders
        subscriptions:
          typed:
            rules:
              - name: every-type
                correlation:
                  properties:
                    sb: {byte: -3}
                    ub: {ubyte: 200}
                    sh: {short: 3}
                    us: {ushort: 3}
                    i: {int: 3}
                    ui: {uint: 3}
                    l: 3
                    ul: {ulong: 18446744073709551615}
                    f: {float: 0.3}
                    d: 0.3
                    m: {decimal: '0.10'}
                    c: {char: A}
                    s: text
                    y: {symbol: text}
                    b: true
                    g: {uuid: 00112233-4455-6677-8899-aabbccddeeff}
                    t: {timestamp: '2024-01-02T03:04:05.678Z'}
                    o: {datetimeoffset: '2024-01-02T05:04:05.1234567+02:00'}
                    ts: {timespan: P1DT2H3M4.5S}
                    u: {uri: 'https://example.com/a%20b'}
                    x: {binary: AAEC}
                    n: null
        """,
    )
    result = rulefiles.load([path])
    assert result.ok, [d.message for d in result.diagnostics]
    props = result.state.topics[0].subscriptions[0].rules[0].filter.property_map
    assert {k: v.type.value for k, v in props.items()} == {
        "sb": "byte", "ub": "ubyte", "sh": "short", "us": "ushort", "i": "int", "ui": "uint", "l": "long",
        "ul": "ulong", "f": "float", "d": "double", "m": "decimal", "c": "char", "s": "string", "y": "symbol",
        "b": "bool", "g": "uuid", "t": "timestamp", "o": "datetimeoffset", "ts": "timespan", "u": "uri",
        "x": "binary", "n": "null",
    }
    assert str(props["m"].value) == "0.10" and props["f"].value == TypedValue("float", 0.3).value != 0.3
    assert props["o"].to_typed_form() == {"datetimeoffset": "2024-01-02T03:04:05.1234567Z"}
    assert props["ts"].value == ((26 * 60 + 3) * 60 + 4) * 10_000_000 + 5_000_000


@pytest.mark.parametrize(
    "value, message",
    [
        ("{decimal: 0.1}", "write a decimal as text"),
        ("{sbyte: 1}", "AMQP byte is .NET sbyte"),
        ("{byte: 200}", "out of range for byte"),
        ("{timespan: '00:05:00'}", "ISO 8601 duration"),
        ("{timespan: P1M}", "no years, months"),
        ("{char: AB}", "exactly one character"),
        ("{uri: relative/path}", "absolute URI"),
        ("{datetimeoffset: '2024-13-01T00:00:00Z'}", "not a valid date"),
    ],
)
def test_bad_typed_values_are_explained(write, value, message):
    path = write("bad.yaml", f"topic: t\nsubscriptions:\n  s:\n    rules:\n      - name: r\n        correlation: {{properties: {{p: {value}}}}}\n")
    result = rulefiles.load([path])
    assert not result.ok
    assert any(message in d.message and d.origin.line == 6 for d in result.diagnostics), [d.message for d in result.diagnostics]


@pytest.mark.unit
def test_the_located_read_resolves_scalars_as_the_safe_loader_does(write):
    """located's loader resolves tags itself (cached per plain text): the values must not change."""
    import yaml

    from reconciler.rulefiles.located import read_document

    text = """
        plain: [yes, No, on, OFF, y, n, ~, null, '', 010, 0o10, 0x1F, 1_000, 1:30, 1e3, 1.5e3, .inf, -.Inf, 12, -3]
        quoted: ['yes', "010", '~', "1.5"]
        block: |
          yes
        nested: {a: [true, {b: false}], "c": 1.0}
        again: [yes, 010, 1:30]
        """
    path = write("scalars.yaml", text)
    doc, _ = read_document(path, "scalars.yaml")
    expected = yaml.load(path.read_text(), Loader=yaml.SafeLoader)
    assert doc == expected and doc["plain"][0] is True and doc["quoted"][0] == "yes"
