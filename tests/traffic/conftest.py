"""Traffic fixtures: one SparkSession for the whole run (JVM start-up is the expensive part)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from reconciler.model import (
    CorrelationFilter,
    Message,
    TypedValue,
    ValueType,
    correlation_from_doc,
    system_property_name,
)
from reconciler.traffic.rows import message_to_row, rows_to_table


@pytest.fixture(scope="session")
def spark():
    from reconciler.traffic.session import spark_session

    session = spark_session("local[2]", app_name="sbrules-tests")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture
def interpreted(spark):
    """Evaluate without code generation: the differential tests run hundreds of filter columns
    over a few hundred rows, where compiling Java for them costs far more than interpreting."""
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode")
    saved = {k: spark.conf.get(k, None) for k in keys}
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    yield spark
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@pytest.fixture
def frame_of(spark, tmp_path):
    """Messages → a Spark DataFrame through the real Parquet layout (column ``idx`` = position)."""

    def build(messages: Iterable[Message], topic: str = "t") -> "object":
        rows = []
        for i, message in enumerate(messages):
            row = message_to_row(message, topic=topic, subscription="s")
            row["message_id"] = row["message_id"] or f"m{i}"
            rows.append(row)
        path = Path(tmp_path) / f"frame-{len(list(tmp_path.iterdir()))}.parquet"
        table = rows_to_table(rows)
        table = table.append_column("idx", pa.array(range(len(rows)), pa.int64()))
        pq.write_table(table, path)
        return spark.read.parquet(str(path))

    return build


# -- the SQL vectors (tests/data/sql_vectors.yaml) --------------------------------------------

VECTORS = Path(__file__).resolve().parents[1] / "data" / "sql_vectors.yaml"


def typed(raw: Any) -> TypedValue:
    """A vector value: plain YAML scalar, or ``{type: int32, value: N}``."""
    if isinstance(raw, dict) and "type" in raw:
        vtype = {"int32": "int", "int64": "long"}.get(raw["type"], raw["type"])
        return TypedValue(vtype, raw["value"])
    return TypedValue.infer(raw)


def message(vector: dict[str, Any]) -> Message:
    sys_props = {}
    for key, raw in (vector.get("sys") or {}).items():
        name = system_property_name(key)
        value = typed(raw)
        if value.type is ValueType.NULL:
            continue
        sys_props[name] = value
    user = {str(k): typed(v) for k, v in (vector.get("props") or {}).items()}
    return Message(sys=sys_props, user=user)


@dataclass(frozen=True)
class FilterVector:
    id: str
    expr: str
    params: dict[str, TypedValue]
    message: Message
    expect: Any


def filter_vectors() -> list[FilterVector]:
    """Every filter vector the engine accepts at creation time (``error:parse`` ones excluded)."""
    doc = yaml.safe_load(VECTORS.read_text())
    out = []
    for v in doc["filter_vectors"]:
        if v["expect"] == "error:parse":
            continue
        params = {k: typed(x) for k, x in (v.get("params") or {}).items()}
        out.append(FilterVector(v["id"], v["expr"], params, message(v), v["expect"]))
    return out


def correlation_vectors() -> list[tuple[str, CorrelationFilter, Message, Any]]:
    doc = yaml.safe_load(VECTORS.read_text())
    out = []
    for v in doc["correlation_vectors"]:
        flt = dict(v["filter"])
        props = flt.pop("properties", None)
        fields = {k[0].lower() + "".join("_" + c.lower() if c.isupper() else c for c in k[1:]): x for k, x in flt.items()}
        fields = {("subject" if k == "label" else k): x for k, x in fields.items()}
        if props:
            fields["properties"] = {k: typed(x).to_typed_form() for k, x in props.items()}
        out.append((v["id"], correlation_from_doc(fields), message(v), v["expect"]))
    return out


@pytest.fixture(scope="session")
def sql_filter_vectors() -> list[FilterVector]:
    return filter_vectors()


@pytest.fixture(scope="session")
def sql_correlation_vectors():
    return correlation_vectors()
