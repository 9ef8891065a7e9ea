"""What a sample's Parquet footers record (the type tags of its properties, its topics), read
back for a report, and what the translator drops when it knows the types."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from reconciler.model import Message, TypedValue
from reconciler.traffic.sample.rows import PROPERTY_TAGS_KEY, TOPICS_KEY, message_to_row, rows_to_table
from reconciler.traffic.sample.sampler import Dataset

pytestmark = pytest.mark.spark


def _message(**user: TypedValue) -> Message:
    return Message(sys={"MessageId": TypedValue("string", "m")}, user=user)


def _write(path, messages, batch_rows=2):
    store = Dataset(path, batch_rows=batch_rows)
    for m in messages:
        store.add(message_to_row(m, topic="t", subscription="s"))
    store.flush()
    return store


def test_each_file_records_the_tags_of_its_rows():
    table = rows_to_table(
        message_to_row(m)
        for m in [
            _message(Amount=TypedValue("double", 1.5), region=TypedValue("string", "eu")),
            _message(amount=TypedValue("string", "n/a"), gone=TypedValue("null")),
        ]
    )
    recorded = json.loads(table.schema.metadata[PROPERTY_TAGS_KEY])
    assert recorded == {"amount": ["double", "string"], "gone": ["null"], "region": ["string"]}


def test_footers_and_rows_give_the_same_union_across_files(spark, tmp_path):
    from reconciler.traffic.sample.footers import _from_footers, _types_from_rows, property_types

    messages = [
        _message(amount=TypedValue("double", 1.0)),
        _message(amount=TypedValue("long", 2)),
        _message(flag=TypedValue("bool", True)),
        _message(),
        _message(amount=TypedValue("null")),
    ]
    store = _write(tmp_path / "sample", messages)
    assert len(store.files) == 3
    frame = spark.read.parquet(str(tmp_path / "sample"))
    want = {"amount": frozenset({"double", "long", "null"}), "flag": frozenset({"bool"})}
    assert _from_footers(frame.inputFiles()).types == want
    assert _types_from_rows(frame) == want
    assert property_types(frame) == want


def test_a_file_without_recorded_tags_makes_spark_compute_them(spark, tmp_path):
    from reconciler.traffic.sample.footers import _from_footers, property_types

    _write(tmp_path / "sample", [_message(a=TypedValue("int", 1))])
    foreign = rows_to_table([message_to_row(_message(a=TypedValue("string", "x")), topic="t")])
    pq.write_table(foreign.replace_schema_metadata(None), tmp_path / "sample" / "other.parquet")
    frame = spark.read.parquet(str(tmp_path / "sample"))
    assert _from_footers(frame.inputFiles()).types is None
    assert property_types(frame) == {"a": frozenset({"int", "string"})}


def test_known_types_drop_unreachable_branches(spark):
    """With ``quantity`` only ever a long, ``quantity > 5`` has no type-mismatch error left, and a
    property the sample never holds folds to UNKNOWN without a lookup of its value."""
    from pyspark.sql import functions as F

    from reconciler.sql import parse_filter
    from reconciler.traffic.spark import PropertyCells, to_spark

    frame = spark.createDataFrame([], "props map<string, struct<k:string,t:string,s:string,l:bigint,d:double,b:boolean>>")
    types = {"quantity": frozenset({"long"})}
    _, typed = PropertyCells.over(frame, ["quantity", "absent"], types)
    _, untyped = PropertyCells.over(frame, ["quantity", "absent"])

    _, err = to_spark(parse_filter("quantity > 5"), typed)
    assert "mismatch" not in str(err)
    _, err = to_spark(parse_filter("quantity > 5"), untyped)
    assert "mismatch" in str(err)

    value, err = to_spark(parse_filter("absent * 2 = 3"), typed)
    assert str(value) == str(F.lit(None).cast("boolean")) and str(err) == str(F.lit(None).cast("string"))


def test_a_file_an_older_sbrules_wrote_is_refused_with_a_reason(spark, tmp_path):
    """Older samples recorded tags but widened short to int and float to double: a report on them
    would disagree with the broker, so they are refused (one line, in the report's error)."""
    from reconciler.traffic.sample.footers import OutdatedSample, property_types
    from reconciler.traffic.sample.rows import LAYOUT_KEY

    _write(tmp_path / "sample", [_message(a=TypedValue("short", 1))])
    old = rows_to_table([message_to_row(_message(a=TypedValue("int", 1)), topic="t")])
    footer = {k: v for k, v in old.schema.metadata.items() if k != LAYOUT_KEY}
    pq.write_table(old.replace_schema_metadata(footer), tmp_path / "sample" / "old.parquet")
    with pytest.raises(OutdatedSample) as info:
        property_types(spark.read.parquet(str(tmp_path / "sample")))
    assert info.value.path.endswith("old.parquet")


def test_each_file_records_its_topics_and_a_report_reads_them_without_spark(spark, tmp_path):
    from reconciler.traffic.sample.footers import _from_footers, _topics_from_rows, sample_facts

    store = Dataset(tmp_path / "sample", batch_rows=2)
    for topic in ["Orders", "orders", "billing", "audit"]:
        store.add(message_to_row(_message(), topic=topic, subscription="all"))
    store.flush()
    first = pq.read_metadata(tmp_path / "sample" / store.files[0]).metadata
    assert json.loads(first[TOPICS_KEY]) == ["Orders", "orders"]
    frame = spark.read.parquet(str(tmp_path / "sample"))
    want = frozenset({"Orders", "orders", "billing", "audit"})
    assert _from_footers(frame.inputFiles()).topics == want
    assert _topics_from_rows(frame) == want
    assert sample_facts(frame)[1] == want


def test_a_file_without_recorded_topics_makes_spark_find_them(spark, tmp_path):
    from reconciler.traffic.sample.footers import _from_footers, sample_facts

    _write(tmp_path / "sample", [_message(a=TypedValue("int", 1))])
    table = rows_to_table([message_to_row(_message(a=TypedValue("int", 2)), topic="older")])
    footer = {k: v for k, v in table.schema.metadata.items() if k != TOPICS_KEY}
    pq.write_table(table.replace_schema_metadata(footer), tmp_path / "sample" / "older.parquet")
    frame = spark.read.parquet(str(tmp_path / "sample"))
    facts = _from_footers(frame.inputFiles())
    assert facts.topics is None and facts.types == {"a": frozenset({"int"})}
    assert sample_facts(frame) == ({"a": frozenset({"int"})}, frozenset({"t", "older"}))
