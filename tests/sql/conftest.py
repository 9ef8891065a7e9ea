"""Fixtures for the SQL language tests: the SQL vectors (tests/data/sql_vectors.yaml) and message builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reconciler.model import CORRELATION_SYS_NAMES, CorrelationFilter, Message, TypedValue, typed_properties

VECTORS_PATH = Path(__file__).resolve().parents[1] / "data" / "sql_vectors.yaml"


def load_vectors() -> dict[str, Any]:
    with open(VECTORS_PATH, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def typed_form(value: Any) -> Any:
    """The vectors' value convention ({type: int32, value: N} = Int32) in the model's typed form."""
    if isinstance(value, dict) and value.get("type") == "int32":
        return {"int": value["value"]}
    return value


def vector_message(vector: dict[str, Any]) -> Message:
    return Message.from_json(
        {
            "sys": {k: typed_form(v) for k, v in (vector.get("sys") or {}).items()},
            "user": {k: typed_form(v) for k, v in (vector.get("props") or {}).items()},
        }
    )


def vector_parameters(vector: dict[str, Any]) -> dict[str, TypedValue] | None:
    params = vector.get("params")
    if not params:
        return None
    return {k: TypedValue.from_typed_form(typed_form(v)) for k, v in params.items()}


_FIELD_BY_SYS_NAME = {sys_name: field for field, sys_name in CORRELATION_SYS_NAMES.items()}


def vector_correlation(doc: dict[str, Any]) -> CorrelationFilter:
    fields: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "properties":
            fields["properties"] = typed_properties({k: typed_form(v) for k, v in value.items()})
        else:
            fields[_FIELD_BY_SYS_NAME[key]] = value
    return CorrelationFilter(**fields)
