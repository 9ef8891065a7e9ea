"""Rules-as-code files → DesiredState, with every problem located at file:line:column.

YAML is composed into nodes (which keep their marks), converted to plain data while a side table
records where each value sits, validated against schemas/rules.schema.json (all violations, not
the first), and built into the model through ``model.rule_from_doc``. Files declaring the same
topic are merged; a subscription or rule declared twice is an error naming both places.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import fastjsonschema
import jsonschema
import yaml

from reconciler.diagnostics import Diagnostic, render_text
from reconciler.errors import SbrulesError
from reconciler.model import (
    DesiredState,
    Origin,
    Rule,
    RuleFormError,
    Subscription,
    Topic,
    TypedValueError,
    rule_from_doc,
)

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "rules.schema.json"
RULE_FILE_SUFFIXES = (".yaml", ".yml")
MAX_NODES = 200_000
MAX_DEPTH = 64

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_scalar_constructor = yaml.constructor.SafeConstructor()
_PLAIN_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}


class SpecErrors(SbrulesError):
    """The rule files are invalid; ``diagnostics`` holds every located error."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__(render_text(self.diagnostics))


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    """The thorough validator: reports every violation, used once a file is known to be invalid."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


@lru_cache(maxsize=1)
def _fast_check():
    """A compiled validator (about 15x faster) that answers "valid?" for the common, valid case."""
    return fastjsonschema.compile(_validator().schema)


# ------------------------------------------------------------------------------------------------
# YAML nodes → plain data + marks
# ------------------------------------------------------------------------------------------------

Path_ = tuple[Any, ...]


class _Located:
    """Plain data converted from YAML nodes, and where each value and key was written."""

    def __init__(self, file: str):
        self.file = file
        self.values: dict[Path_, Origin] = {}
        self.keys: dict[Path_, Origin] = {}
        self.styles: dict[Path_, str | None] = {}
        self.lines: list[str] = []
        self.nodes = 0

    def origin(self, path: Path_) -> Origin:
        """The closest recorded place for ``path`` (falls back to its parents)."""
        probe = tuple(path)
        while probe:
            if probe in self.values:
                return self.values[probe]
            probe = probe[:-1]
        return self.values.get((), Origin(self.file, 1, 1))

    def key_origin(self, path: Path_) -> Origin:
        return self.keys.get(tuple(path)) or self.origin(path)

    def mark(self, node: yaml.Node) -> Origin:
        return Origin(self.file, node.start_mark.line + 1, node.start_mark.column + 1)


class _ConversionError(Exception):
    def __init__(self, diag: Diagnostic):
        super().__init__(diag.message)
        self.diag = diag


def _convert(node: yaml.Node, path: Path_, loc: _Located, depth: int = 0) -> Any:
    loc.nodes += 1
    origin = loc.mark(node)
    if loc.nodes > MAX_NODES or depth > MAX_DEPTH:
        raise _ConversionError(
            Diagnostic("error", "yaml", "document too large or too deeply nested (aliases expanded)", origin)
        )
    loc.values[path] = origin
    if isinstance(node, yaml.ScalarNode):
        loc.styles[path] = node.style
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value  # keep dates as written; typed values say {timestamp: ...} explicitly
        if node.tag not in _PLAIN_TAGS:
            raise _ConversionError(Diagnostic("error", "yaml", f"unsupported YAML tag {node.tag}", origin))
        return _scalar_constructor.construct_object(node)
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, path + (i,), loc, depth + 1) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_origin = loc.mark(key_node)
            if not isinstance(key_node, yaml.ScalarNode):
                raise _ConversionError(Diagnostic("error", "yaml", "mapping keys must be plain names", key_origin))
            key = key_node.value
            if key in out:
                first = loc.keys[path + (key,)]
                raise _ConversionError(
                    Diagnostic("error", "duplicate-key", f"key {key!r} appears twice in one mapping", key_origin, related=(first,))
                )
            loc.keys[path + (key,)] = key_origin
            out[key] = _convert(value_node, path + (key,), loc, depth + 1)
        return out
    raise _ConversionError(Diagnostic("error", "yaml", "unsupported YAML node", origin))  # pragma: no cover


def _read_document(file: Path, display: str) -> tuple[Any, _Located]:
    loc = _Located(display)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise _ConversionError(Diagnostic("error", "io", f"cannot read file: {exc.strerror}", Origin(display, 1, 1)))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _ConversionError(Diagnostic("error", "encoding", "file is not valid UTF-8", Origin(display, line, column)))
    loc.lines = text.splitlines()
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        origin = Origin(display, mark.line + 1, mark.column + 1) if mark else Origin(display, 1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        raise _ConversionError(Diagnostic("error", "yaml", f"malformed YAML: {problem}", origin))
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        message = "document too deeply nested" if isinstance(exc, RecursionError) else f"malformed YAML: {exc}"
        raise _ConversionError(Diagnostic("error", "yaml", message, Origin(display, 1, 1)))
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        raise _ConversionError(
            Diagnostic("error", "empty", "file declares nothing: expected a mapping with a 'topic' key", Origin(display, 1, 1))
        )
    if len(nodes) > 1:
        raise _ConversionError(
            Diagnostic(
                "error",
                "multi-document",
                "one rule file declares one topic: split these YAML documents into separate files",
                loc.mark(nodes[1]),
            )
        )
    try:
        return _convert(nodes[0], (), loc), loc
    except RecursionError:
        raise _ConversionError(Diagnostic("error", "yaml", "document too deeply nested", Origin(display, 1, 1)))


# ------------------------------------------------------------------------------------------------
# Schema violations → diagnostics a person can act on
# ------------------------------------------------------------------------------------------------

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


def _schema_diagnostics(doc: Any, loc: _Located) -> list[Diagnostic]:
    try:
        _fast_check()(doc)
        return []
    except fastjsonschema.JsonSchemaException:
        pass
    out: list[Diagnostic] = []
    for err in _validator().iter_errors(doc):
        out.extend(_explain(err, loc))
    return out


def _explain(err: jsonschema.ValidationError, loc: _Located) -> list[Diagnostic]:
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
        words = " or ".join(_TYPE_WORDS.get(w, w) for w in wanted)
        return [Diagnostic("error", "type", f"{where} must be {words}, not {_describe(err.instance)}", origin)]
    if err.validator == "oneOf" and isinstance(err.instance, dict) and path and "name" in err.schema.get("properties", {}):
        kinds = [k for k in ("sql", "correlation", "filter") if k in err.instance]
        name = err.instance.get("name", "?")
        detail = f"it has {', '.join(kinds)}" if kinds else "it has none"
        return [
            Diagnostic("error", "filter-kind", f"rule {name!r} needs exactly one of sql, correlation, filter ({detail})", origin)
        ]
    if err.validator == "anyOf" and path and len(path) >= 2 and path[-2] == "properties":
        return [
            Diagnostic(
                "error",
                "typed-value",
                f"property {path[-1]!r}: {_typed_value_problem(err.instance)}",
                origin,
            )
        ]
    if err.validator == "minProperties" and path and path[-1] == "correlation":
        return [Diagnostic("error", "empty-correlation", "a correlation filter needs at least one field", origin)]
    if err.validator in ("minLength", "maxLength"):
        return [Diagnostic("error", "length", f"{where}: {err.message}", origin)]
    return [Diagnostic("error", "schema", f"{where}: {err.message}", origin)]


def _typed_value_problem(value: Any) -> str:
    if isinstance(value, dict):
        if len(value) != 1:
            return "a typed value is a one-key map such as {int: 3} or {uuid: '…'}"
        (tag, raw), = value.items()
        known = ("int", "long", "double", "string", "bool", "uuid", "timestamp")
        if tag not in known:
            return f"unknown value type {tag!r} (use one of: {', '.join(known)})"
        if tag == "int" and isinstance(raw, int) and not isinstance(raw, bool):
            return f"{raw} does not fit in a 32-bit int (use {{long: {raw}}})"
        return f"{_describe(raw)} is not a valid {tag}"
    return "must be a scalar or a one-key typed map such as {int: 3}"


def _where(path: Path_) -> str:
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


# ------------------------------------------------------------------------------------------------
# Plain data → model
# ------------------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    """What a load produced: the state (possibly partial), every diagnostic and some counts."""

    state: DesiredState
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


def _ambiguous_integers(doc: dict, path: Path_, loc: _Located) -> Iterator[Diagnostic]:
    """Plain integers in correlation properties: the written form does not say int or long."""
    props = (doc.get("correlation") or {}).get("properties") or {}
    for key, value in props.items():
        if isinstance(value, int) and not isinstance(value, bool):
            yield Diagnostic(
                "warning",
                "ambiguous-integer",
                f"rule {doc['name']!r}: property {key!r} is a plain integer, sent as long {value}. Correlation "
                f"matching is type-strict, and .NET int and Microsoft's Python SDK send small integers as "
                f"32-bit int: write {{int: {value}}} or {{long: {value}}} to say which",
                loc.origin(path + ("correlation", "properties", key)),
            )


def _build_rule(doc: dict, path: Path_, loc: _Located) -> Rule:
    rule = rule_from_doc(doc)
    kind = next(k for k in ("sql", "correlation", "filter") if k in doc)
    return replace(
        rule,
        origin=loc.origin(path),
        filter_origin=_text_origin(path + (kind,), loc) if kind == "sql" else loc.origin(path + (kind,)),
        action_origin=_text_origin(path + ("action",), loc) if "action" in doc else None,
    )


def _text_origin(path: Path_, loc: _Located) -> Origin:
    """Where the text of a scalar starts: after the quote, or on the line after a block indicator."""
    origin = loc.origin(path)
    style = loc.styles.get(path)
    if style in ("'", '"'):
        return replace(origin, column=origin.column + 1)
    if style in ("|", ">"):
        for number in range(origin.line, len(loc.lines)):
            content = loc.lines[number]
            if content.strip():
                return Origin(origin.file, number + 1, len(content) - len(content.lstrip()) + 1)
    return origin


def _topic_from_doc(doc: dict, loc: _Located, diags: list[Diagnostic]) -> Topic:
    subs = []
    for sub_name, sub_doc in (doc.get("subscriptions") or {}).items():
        sub_doc = sub_doc or {}
        sub_path = ("subscriptions", sub_name)
        rules: tuple[Rule, ...] | None = None
        if "rules" in sub_doc:
            built = []
            for i, rule_doc in enumerate(sub_doc["rules"] or []):
                rule_path = sub_path + ("rules", i)
                diags.extend(_ambiguous_integers(rule_doc, rule_path, loc))
                try:
                    built.append(_build_rule(rule_doc, rule_path, loc))
                except (RuleFormError, TypedValueError) as exc:
                    sub_key = getattr(exc, "path", ())
                    diags.append(Diagnostic("error", "rule", str(exc), loc.origin(rule_path + tuple(sub_key))))
            rules = tuple(built)
        subs.append(
            Subscription(
                name=str(sub_name),
                rules=rules,
                allow_empty=bool(sub_doc.get("allow_empty", False)),
                origin=loc.key_origin(sub_path),
            )
        )
    return Topic(name=str(doc["topic"]), subscriptions=tuple(subs), origin=loc.origin(("topic",)))


def _merge(topics: Iterable[Topic], diags: list[Diagnostic]) -> DesiredState:
    """Merge topics by name (case-insensitive); duplicates of subscriptions or rules are errors."""
    merged: dict[str, Topic] = {}
    for topic in topics:
        key = topic.name.lower()
        if key not in merged:
            merged[key] = replace(topic, subscriptions=())
        existing = merged[key]
        subs = list(existing.subscriptions)
        for sub in topic.subscriptions:
            twin = next((s for s in subs if s.name.lower() == sub.name.lower()), None)
            if twin is not None:
                diags.append(
                    Diagnostic(
                        "error",
                        "duplicate-subscription",
                        f"subscription {topic.name}/{sub.name} is declared twice",
                        sub.origin,
                        related=tuple(o for o in (twin.origin,) if o),
                    )
                )
                continue
            subs.append(_dedupe_rules(topic, sub, diags))
        merged[key] = replace(existing, subscriptions=tuple(subs))
    return DesiredState(topics=tuple(merged.values()))


def _dedupe_rules(topic: Topic, sub: Subscription, diags: list[Diagnostic]) -> Subscription:
    if sub.rules is None:
        return sub
    seen: dict[str, Rule] = {}
    kept = []
    for rule in sub.rules:
        first = seen.get(rule.name.lower())
        if first is not None:
            diags.append(
                Diagnostic(
                    "error",
                    "duplicate-rule",
                    f"rule {rule.name!r} is declared twice in {topic.name}/{sub.name}",
                    rule.origin,
                    related=tuple(o for o in (first.origin,) if o),
                )
            )
            continue
        seen[rule.name.lower()] = rule
        kept.append(rule)
    return replace(sub, rules=tuple(kept))


def rule_files(paths: Sequence[str | Path]) -> list[Path]:
    """Expand directories into their rule files (recursive, sorted, hidden files skipped)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix in RULE_FILE_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            out.extend(found)
        else:
            out.append(path)
    return out


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def load(paths: Sequence[str | Path]) -> LoadResult:
    """Load files and directories, collecting every diagnostic instead of stopping at the first."""
    diags: list[Diagnostic] = []
    topics: list[Topic] = []
    files = rule_files(paths)
    if not files:
        where = ", ".join(map(str, paths)) or "."
        diags.append(Diagnostic("error", "no-files", f"no rule files (*.yaml, *.yml) found in {where}"))
    for file in files:
        display = _display(file)
        try:
            doc, loc = _read_document(file, display)
        except _ConversionError as exc:
            diags.append(exc.diag)
            continue
        schema_diags = _schema_diagnostics(doc, loc)
        if schema_diags:
            diags.extend(schema_diags)
            continue
        topics.append(_topic_from_doc(doc, loc, diags))
    state = _merge(topics, diags)
    return LoadResult(state=state, diagnostics=diags, files=len(files))


def load_paths(paths: Sequence[str | Path]) -> DesiredState:
    """Load rule files into a DesiredState, or raise SpecErrors listing every located error."""
    result = load(paths)
    if not result.ok:
        raise SpecErrors([d for d in result.diagnostics if d.severity == "error"])
    return result.state
