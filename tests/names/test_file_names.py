"""render and export never write two topics to one file: checked over generated topic names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler import rulefiles
from reconciler.errors import InputError
from reconciler.model import DesiredState, Rule, Subscription, Topic, TrueFilter
from reconciler.names import name_key
from reconciler.rulefiles.render import file_name, file_names, render_documents, write_documents

#: Characters that slugs replace or file systems fold, with letters that only differ in case.
TOPIC = st.text(alphabet="aAbB_/.-09\u00e4\u00c4\u212ak\u00df ", min_size=1, max_size=8).filter(lambda t: t.strip("/") == t)


@pytest.mark.unit
@given(st.lists(TOPIC, max_size=8))
def test_distinct_topics_get_distinct_files(topics):
    try:
        names = file_names(topics)
    except InputError as exc:  # only a topic literally spelled as another's slug and digest
        assert "would both be written to" in str(exc)
        return
    by_file: dict[str, str] = {}
    for topic in topics:
        owner = by_file.setdefault(names[topic].lower(), topic)
        assert name_key(owner) == name_key(topic), (owner, topic, names[topic])
        assert names[topic].endswith(".yaml") and "/" not in names[topic] and not names[topic].startswith(".")


@pytest.mark.unit
def test_the_issue_pair_and_a_plain_name():
    assert file_name("orders") == "orders.yaml"
    assert file_name("orders_eu") == "orders_eu.yaml"
    assert file_name("orders/eu") != file_name("orders_eu")
    assert file_name("Orders/EU") == file_name("orders/eu").replace("orders_eu", "Orders_EU")  # one topic, one digest
    assert re.fullmatch(r"orders_eu-[0-9a-f]{16}\.yaml", file_name("orders/eu"))  # 64 bits: no pair found by trying


@pytest.mark.unit
def test_a_topic_spelled_as_another_topics_file_is_an_error():
    taken = file_name("orders/eu").removesuffix(".yaml")
    with pytest.raises(InputError, match="would both be written to"):
        file_names(["orders/eu", taken])


@pytest.mark.unit
@given(st.lists(TOPIC, min_size=1, max_size=5, unique_by=name_key))
def test_rendered_files_load_back_as_the_same_topics(tmp_path_factory, topics):
    state = DesiredState(
        topics=tuple(Topic(t, (Subscription("s", (Rule("r", TrueFilter()),)),)) for t in topics)
    )
    out = tmp_path_factory.mktemp("render")
    write_documents(render_documents(state, "dev"), out)
    loaded = rulefiles.load([out])
    assert not loaded.diagnostics
    assert sorted(t.name for t in loaded.state.topics) == sorted(topics)
