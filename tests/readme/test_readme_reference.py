"""The documentation's reference tables (README and docs/) say exactly what the code and the schemas do: every validate
diagnostic code, every rule-file key, every typed-value type, every error code."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from reconciler.cli.output import ErrorCode, classify

from .pages import table

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"

CODE_SPAN = re.compile(r"`([^`]+)`")


def spans(cell: str) -> list[str]:
    return CODE_SPAN.findall(cell)


def emitted_diagnostic_codes() -> dict[str, str]:
    """Every code a ``Diagnostic(...)`` in reconciler/ is created with → where (a constant is required)."""
    codes: dict[str, str] = {}
    for path in (REPO / "reconciler").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Diagnostic"):
                continue
            code = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "code"), None)
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            assert isinstance(code, ast.Constant), f"{where}: a diagnostic code must be a literal, so it can be documented"
            codes.setdefault(code.value, where)
    return codes


@pytest.mark.slow
def test_the_validate_code_table_lists_exactly_the_codes_the_code_emits():
    documented = [spans(row[0])[0] for row in table("| code | | what was found |")]
    emitted = emitted_diagnostic_codes()
    assert len(documented) == len(set(documented)), "a code is listed twice"
    undocumented = {code: where for code, where in emitted.items() if code not in documented}
    assert not undocumented, f"add these codes to the validate table (docs/commands/validate.md): {undocumented}"
    assert not set(documented) - set(emitted), f"the docs list codes nothing emits: {set(documented) - set(emitted)}"
    schema = json.loads((SCHEMAS / "validate.schema.json").read_text())
    assert set(schema["$defs"]["diagnostic"]["properties"]["code"]["enum"]) == set(emitted)


@pytest.mark.unit
def test_every_rule_file_key_is_documented_and_no_other():
    schema = json.loads((SCHEMAS / "rules.schema.json").read_text())
    defs = schema["$defs"]
    keys = set(schema["properties"]) | set(defs["subscription"]["properties"]) | set(defs["rule"]["properties"])
    keys |= set(defs["correlation"]["properties"])
    documented = [key for row in table("| key | in | meaning |") for key in spans(row[0])]
    assert len(documented) == len(set(documented)), "a key is listed twice"
    assert set(documented) == keys


@pytest.mark.unit
def test_every_typed_value_type_is_documented():
    schema = json.loads((SCHEMAS / "rules.schema.json").read_text())
    types = set(schema["$defs"]["typedValue"]["anyOf"][1]["properties"])
    written = " ".join(row[0] for row in table("| written | type |"))
    assert {t for t in types if f"{{{t}: " not in written} == set()


@pytest.mark.unit
def test_the_error_code_table_lists_exactly_the_codes_and_their_exit_codes():
    rows = table("| `code` | exit | meaning |")
    documented = {spans(row[0])[0]: int(row[1]) for row in rows}
    assert set(documented) == {str(code) for code in ErrorCode}
    schema = json.loads((SCHEMAS / "error.schema.json").read_text())
    assert set(schema["properties"]["error"]["properties"]["code"]["enum"]) == set(documented)
    import click

    assert all(documented[str(code)] == code.exit_code for code in ErrorCode), "docs/output.md and ErrorCode.exit_code disagree"
    assert documented["usage"] == classify(click.UsageError("x")).exit_code
    assert documented["interrupted"] == classify(KeyboardInterrupt()).exit_code
    assert documented["internal"] == classify(RuntimeError("x")).exit_code
