"""The rule-file JSON Schema (``schemas/rules.schema.json``), and its violations as diagnostics a
person can act on: each names the place in the file and says what was expected there.

The schema ships inside the package (``reconciler/schemas/``, kept identical to the repository's
``schemas/`` by a test) and is read with importlib.resources, so an installed wheel finds it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable

import fastjsonschema

from reconciler.diagnostics import Diagnostic
from reconciler.rulefiles.located import DocPath, Located
from reconciler.rulefiles.yaml_versions import ambiguity, describe
from reconciler.typed_values import TypedValue, TypedValueError

if TYPE_CHECKING:
    import jsonschema

SCHEMA_NAME = "rules.schema.json"


def packaged_schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped in the package, by file name (e.g. ``plan.schema.json``)."""
    return json.loads(resources.files("reconciler").joinpath("schemas", name).read_text(encoding="utf-8"))


def _by_id(uri: str) -> dict[str, Any]:
    """A schema another one refers to by ``$id`` (they all share one base: the file name decides)."""
    return packaged_schema(uri.rstrip("/").rsplit("/", 1)[-1])


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    """The thorough validator: reports every violation, used once a file is known to be invalid
    (imported only then: valid files do not pay for loading it)."""
    import jsonschema
    from referencing import Registry, Resource

    schema = packaged_schema(name)
    registry = Registry(retrieve=lambda uri: Resource.from_contents(_by_id(uri)))  # type: ignore[call-arg]
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, registry=registry)


def first_violation(name: str, doc: Any) -> str | None:
    """The violation of schema ``name`` deepest in ``doc`` (the most specific: a wrong field
    rather than the document around it), as ``where: what``; None when the document is valid
    (which the compiled check answers first)."""
    try:
        _fast_check(name)(doc)
        return None
    except fastjsonschema.JsonSchemaException:
        pass
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: (-len(e.absolute_path), e.message))
    if not errors:
        return None
    error = errors[0]
    where = "/".join(str(p) for p in error.absolute_path) or "the document"
    return f"{where}: {error.message}"


#: The keys of which a rule has exactly one: the rule-file schema's ``oneOf`` on a rule.
FILTER_KINDS = ("sql", "correlation", "filter")


@lru_cache(maxsize=None)
def _fast_check(name: str) -> Callable[[Any], None]:
    """A compiled validator (about 15x faster) that answers "valid?" for the common, valid case
    (raising when not), the thorough one reporting every violation after it.

    For rule files it checks the rule's ``oneOf`` (exactly one of :data:`FILTER_KINDS`) itself:
    compiled, that ``oneOf`` raised and caught two exceptions for every valid rule, 0.45 of the
    1.0 s the check took at 100,000 rules. Both together accept exactly what the schema accepts.
    """
    schema = packaged_schema(name)
    rule = schema.get("$defs", {}).get("rule", {})
    if name != SCHEMA_NAME or rule.get("oneOf") != [{"required": [kind]} for kind in FILTER_KINDS]:
        return fastjsonschema.compile(schema, handlers={"https": _by_id})
    del rule["oneOf"]
    without_one_of = fastjsonschema.compile(schema, handlers={"https": _by_id})

    def check(doc: Any) -> None:
        without_one_of(doc)  # so the document has the shape the schema gives it
        for sub in (doc.get("subscriptions") or {}).values():
            for rule_doc in (sub or {}).get("rules") or ():
                if sum(kind in rule_doc for kind in FILTER_KINDS) != 1:
                    raise fastjsonschema.JsonSchemaException("a rule needs exactly one of sql, correlation, filter")

    return check


_TYPE_WORDS = {
    "object": "a map",
    "array": "a list",
    "string": "a string",
    "boolean": "true or false",
    "integer": "an integer",
    "number": "a number",
    "null": "empty",
}


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) < 40 else "a string"
    if isinstance(value, list):
        return "a list"
    return "a map"


def schema_diagnostics(doc: Any, loc: Located, schema: str = SCHEMA_NAME) -> list[tuple[DocPath, Diagnostic]]:
    """Every violation of ``schema`` (a packaged schema's file name) in ``doc``, located, each with
    the path of the value it is about (for an unknown key, the map holding it), so that a caller
    can still check what the violation spares."""
    try:
        _fast_check(schema)(doc)
        return []
    except fastjsonschema.JsonSchemaException:
        pass
    out: list[tuple[DocPath, Diagnostic]] = []
    for err in _validator(schema).iter_errors(doc):
        out.extend((tuple(err.absolute_path), diag) for diag in _explain(err, loc))
    return out


def _explain(err: jsonschema.ValidationError, loc: Located) -> list[Diagnostic]:
    path = tuple(err.absolute_path)
    where = _where(path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extras = sorted(set(err.instance) - set(allowed))
        return [
            Diagnostic(
                "error",
                "unknown-key",
                f"unknown key {key!r} in {where}" + (f" (expected one of: {', '.join(allowed)})" if allowed else ""),
                loc.key_origin(path + (key,)),
            )
            for key in extras
        ]
    origin = loc.origin(path)
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return [Diagnostic("error", "missing-key", f"{where} needs a {missing!r} key", origin)]
    if err.validator == "type":
        wanted = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        words = " or ".join(_TYPE_WORDS.get(str(w), str(w)) for w in wanted)
        return [Diagnostic("error", "type", f"{where} must be {words}, not {_describe(err.instance)}", origin)]
    if err.validator == "oneOf" and isinstance(err.instance, dict) and path and "name" in err.schema.get("properties", {}):
        kinds = [k for k in ("sql", "correlation", "filter") if k in err.instance]
        name = err.instance.get("name", "?")
        detail = f"it has {', '.join(kinds)}" if kinds else "it has none"
        return [
            Diagnostic("error", "filter-kind", f"rule {name!r} needs exactly one of sql, correlation, filter ({detail})", origin)
        ]
    if err.validator == "anyOf" and path and len(path) >= 2 and path[-2] in ("properties", "vars"):
        what = "property" if path[-2] == "properties" else "variable"
        return [
            Diagnostic(
                "error",
                "typed-value",
                f"{what} {path[-1]!r}: {_typed_value_problem(err.instance)}{_yaml_1_1_hint(err.instance, path, loc)}",
                origin,
            )
        ]
    if err.validator == "minProperties" and path and path[-1] == "correlation":
        return [Diagnostic("error", "empty-correlation", "a correlation filter needs at least one field", origin)]
    if err.validator in ("minLength", "maxLength"):
        return [Diagnostic("error", "length", f"{where}: {err.message}", origin)]
    return [Diagnostic("error", "schema", f"{where}: {err.message}", origin)]


def _yaml_1_1_hint(value: Any, path: DocPath, loc: Located) -> str:
    """Why ``{string: yes}`` is not a string: YAML 1.1 made the plain scalar a bool (quote it)."""
    if not (isinstance(value, dict) and len(value) == 1):
        return ""
    ((tag, raw),) = value.items()
    text = loc.plain(path + (tag,))
    unclear = ambiguity(text, raw) if text is not None else None
    if unclear is None:
        return ""
    return f" ({text} is {describe(raw)} in YAML 1.1, which sbrules reads: quote it, '{text}', to mean the text)"


def _typed_value_problem(value: Any) -> str:
    """What is wrong with a typed value, in the model's words (the one reader of typed forms)."""
    try:
        TypedValue.from_typed_form(value)
    except TypedValueError as exc:
        return str(exc)
    return "must be a scalar or a one-key typed map such as {int: 3}"


def _where(path: DocPath) -> str:
    if not path:
        return "the file"
    if path[0] == "subscriptions" and len(path) >= 2:
        text = f"subscription {path[1]!r}"
        if len(path) >= 4 and path[2] == "rules":
            text += f" rule #{path[3] + 1}"
            rest = path[4:]
        else:
            rest = path[2:]
        if rest:
            text += " " + ".".join(map(str, rest))
        return text
    return ".".join(map(str, path))

