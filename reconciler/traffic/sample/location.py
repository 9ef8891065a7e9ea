"""Where a traffic sample lives: a local directory or a Hadoop-style URL, as Spark and pyarrow reach it.

Spark reads a sample through Hadoop's filesystems, which the driver, every executor and a Spark
Connect server each resolve for themselves: ``s3a://``, ``abfss://``, ``gs://``, ``hdfs://``,
``file:`` (with the connector jars and credentials those need). A relative local path would be
resolved against each process's own working directory, so local paths reach Spark absolute.

sbrules itself writes samples (``sbrules sample --out``) and reads their Parquet footers (the
property type tags) through pyarrow's filesystems: local paths and ``file:``, ``s3://`` (Hadoop's
``s3a://`` and ``s3n://`` mean the same buckets), ``gs://``, ``abfs://`` and ``abfss://``
(``container@account.dfs.core.windows.net``), and ``hdfs://`` where libhdfs is installed.
"""

from __future__ import annotations

import os
from typing import Any

from reconciler.errors import SbrulesError

#: Hadoop URL schemes whose buckets pyarrow reaches under another scheme.
_ARROW_SCHEME = {"s3a": "s3", "s3n": "s3"}


class LocationError(SbrulesError):
    """A sample location that sbrules cannot reach from this process."""


def is_url(location: str) -> bool:
    """Whether ``location`` names its filesystem (``scheme://…`` or ``file:…``)."""
    return "://" in location or location.startswith("file:")


def for_spark(location: str | os.PathLike) -> str:
    """The sample as Spark should be given it: a URL unchanged, a local path made absolute."""
    text = os.fspath(location)
    return text if is_url(text) else os.path.abspath(text)


def filesystem(location: str | os.PathLike) -> tuple[Any, str]:
    """The pyarrow filesystem holding ``location``, and the path within it."""
    import pyarrow.fs

    text = os.fspath(location)
    if not is_url(text):
        return pyarrow.fs.LocalFileSystem(), os.path.abspath(text)
    scheme, rest = text.split(":", 1)
    uri = f"{_ARROW_SCHEME.get(scheme.lower(), scheme)}:{rest}"
    try:
        return pyarrow.fs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:  # pyarrow: ArrowInvalid (a ValueError) or a missing library
        raise LocationError(f"{text}: sbrules cannot reach this location through pyarrow ({exc})") from None
