"""located.read_quickly: the same data and the same places as read_document, or None (and then
read_document reports) for every document read_document would find something in."""

from __future__ import annotations

import pytest

from reconciler.rulefiles import located
from reconciler.rulefiles.located import MAX_DEPTH, DocumentError, read_document, read_quickly

pytestmark = pytest.mark.unit

GOOD = {
    "test file": """
        topic: orders
        messages:
          base: {sys: {Label: refund}, user: {amount: {double: 1500.0}}}
        cases:
          - name: a refund
            given: {like: base, user: {currency: EUR}}
            expect:
              only: [billing, audit]
              copies: {billing: [{rule: big, user: {priority: high}}]}
          - {name: heartbeat, given: {sys: {Label: heartbeat}}, expect: {unrouted: true}}
        """,
    "scalars": """
        plain: [yes, No, on, OFF, y, n, ~, null, '', 010, 0o10, 0x1F, 1_000, 1:30, 1e3, .inf, -.Inf, 12, 2024-01-02]
        quoted: ['yes', "010", '~', "1.5"]
        block: |
          yes
        folded: >
          a
          b
        "quoted key": 1
        1: numeric key
        """,
    "aliases": """
        base: &b {a: 1, b: [x, y]}
        one: *b
        two: [*b, *b]
        """,
    "byte order mark": "\ufefftopic: t\ncases: []\n",
    "a scalar document": "just text\n",
}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_good_document_reads_the_same_with_the_same_places(write, name):
    path = write("doc.yaml", GOOD[name])
    doc, located = read_document(path, "doc.yaml")
    quick = read_quickly(path, "doc.yaml")
    assert quick is not None
    quick_doc, places = quick
    assert quick_doc == doc and [type(v) for v in _leaves(quick_doc)] == [type(v) for v in _leaves(doc)]
    for where in located.values:
        assert places.origin(where) == located.origin(where), where
        assert places.style(where) == located.style(where) and places.plain(where) == located.plain(where)
    for where in located.keys:
        assert places.key_origin(where) == located.key_origin(where), where
    assert places.key_node(("no such key",)) is None and places.origin(("no such key", 3)) == located.origin(())


def _leaves(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


BAD = {
    "malformed": "topic: [unclosed\n",
    "duplicate key": "topic: a\ntopic: b\n",
    "unsupported tag": "topic: !!binary aGVsbG8=\n",
    "python tag": "topic: !!python/name:os.system\n",
    "map as key": "? {a: 1}\n: b\n",
    "two documents": "topic: a\n---\ntopic: b\n",
    "empty": "# nothing\n",
    "too deep": "a: " + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "\n",
    "too many nodes (aliases)": "a: &a [" + ", ".join(["x"] * 20) + "]\nb: [" + ", ".join(["*a"] * 30) + "]\n",
    "not UTF-8": b"topic: \xff\n",
    "tab indent": "topic:\n\t- a\n",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_document_read_document_finds_something_in_is_left_to_it(write, monkeypatch, name):
    monkeypatch.setattr(located, "MAX_NODES", 500)  # both readers' limit, read when they run
    path = write("doc.yaml", BAD[name])
    assert read_quickly(path, "doc.yaml") is None
    with pytest.raises(DocumentError):
        read_document(path, "doc.yaml")


def test_a_missing_file_is_left_to_read_document(tmp_path):
    assert read_quickly(tmp_path / "absent.yaml", "absent.yaml") is None
