"""Where a sample lives: local paths reach Spark absolute, URLs unchanged; sbrules reaches the
same places through pyarrow (Hadoop's s3a:// as pyarrow's s3://)."""

from __future__ import annotations

import os
import re

import pyarrow.fs
import pyarrow.parquet as pq
import pytest

from reconciler.model import Message, TypedValue
from reconciler.traffic.sample.location import LocationError, filesystem, for_spark
from reconciler.traffic.sample.rows import message_to_row
from reconciler.traffic.sample.sampler import Dataset


@pytest.mark.unit
def test_local_paths_reach_spark_absolute_and_urls_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert for_spark("samples/orders") == str(tmp_path / "samples" / "orders")
    for url in ("s3a://bucket/samples/orders", "abfss://c@acct.dfs.core.windows.net/s", "file:///data/s", "gs://b/s"):
        assert for_spark(url) == url


@pytest.mark.parametrize(
    "url, kind, path",
    [
        ("s3a://bucket/samples/orders?region=eu-west-1", pyarrow.fs.S3FileSystem, "bucket/samples/orders"),
        ("s3://bucket/samples/orders?region=eu-west-1", pyarrow.fs.S3FileSystem, "bucket/samples/orders"),
        ("gs://bucket/samples", pyarrow.fs.GcsFileSystem, "bucket/samples"),
        ("abfss://box@acct.dfs.core.windows.net/samples", pyarrow.fs.AzureFileSystem, "box/samples"),
        ("file:///data/samples", pyarrow.fs.LocalFileSystem, "/data/samples"),
    ],
)
@pytest.mark.unit
def test_urls_reach_pyarrow_filesystems(url, kind, path):
    fs, where = filesystem(url)
    assert isinstance(fs, kind) and where == path


@pytest.mark.unit
def test_a_location_pyarrow_cannot_reach_is_one_clear_error():
    with pytest.raises(LocationError, match=re.escape("wasbs://c@a.blob.core.windows.net/s: sbrules cannot reach")):
        filesystem("wasbs://c@a.blob.core.windows.net/s")


@pytest.mark.slow
def test_a_sample_written_to_a_file_url_reads_back_and_continues(tmp_path):
    url = (tmp_path / "sample").as_uri()
    store = Dataset(url, batch_rows=1)
    message = Message(
        sys={"MessageId": TypedValue("string", "m1"), "SequenceNumber": TypedValue("long", 7)},
        user={"region": TypedValue("string", "eu")},
    )
    store.add(message_to_row(message, topic="orders", subscription="all"))
    store.advance("orders", "all", 7)
    store.flush()
    assert sorted(os.listdir(tmp_path / "sample")) == ["_sbrules_state.json", *store.files]
    assert pq.read_table(tmp_path / "sample").column("message_id").to_pylist() == ["m1"]
    again = Dataset(url)
    assert again.positions("orders", "all") == {0: 7}
    assert again.existing_keys("orders") == {7}

