"""Rule files → DesiredState, with every problem located at file:line:column.

Each file is read into plain data with marks (``located``), validated against the rule-file
schema (all violations, not the first; ``schema``), and built into the model through
``model.rule_from_doc``. Files declaring the same topic are merged; a subscription or rule declared
twice is an error naming both places.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

from reconciler.diagnostics import Diagnostic, SqlContext, render_text
from reconciler.errors import ErrorCode, SbrulesError
from reconciler.gc_pause import paused_gc
from reconciler.model import (
    DesiredState,
    NonFiniteValueError,
    Origin,
    Rule,
    RuleFormError,
    SqlFilter,
    Subscription,
    Topic,
    TypedValue,
    TypedValueError,
    rule_from_doc,
)
from reconciler.names import name_key, owned
from reconciler.rulefiles import yaml_versions
from reconciler.rulefiles.located import DocPath, DocumentError, Located, read_document
from reconciler.rulefiles.schema import FILTER_KINDS, SCHEMA_NAME, schema_diagnostics
from reconciler.sql.fallthrough import FALLTHROUGH_RULE_NAME, NotExpressible, fallthrough_filter
from reconciler.typed_values import read_typed_form, same_value_other_types

RULE_FILE_SUFFIXES = (".yaml", ".yml")
#: Routing test files (``sbrules test``) live beside the rule files and are never read as rule files.
TEST_FILE_SUFFIXES = (".test.yaml", ".test.yml")


def is_test_file(path: Path) -> bool:
    """Whether ``path`` is a routing test file (``*.test.yaml``) rather than a rule file."""
    return path.name.endswith(TEST_FILE_SUFFIXES)


class RuleFileErrors(SbrulesError):
    """The rule files are invalid; ``diagnostics`` holds every located error."""

    code = ErrorCode.RULES_INVALID

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__(render_text(self.diagnostics))


@dataclass
class LoadResult:
    """What a load produced: the state (possibly partial), every diagnostic and some counts."""

    state: DesiredState
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


def _ambiguous_scalars(doc: dict, path: DocPath, loc: Located) -> Iterator[Diagnostic]:
    """Plain scalars in correlation properties whose written form does not settle their type: YAML
    1.1 forms other readers take for another type (``yes``, ``1e3``, ``1:30``, ``010``), and plain
    integers (int or long?). Matching is type-strict, so each gets a warning saying how to pin it."""
    correlation = doc.get("correlation")
    props = (correlation.get("properties") if isinstance(correlation, dict) else None) or {}
    for key, written in props.items():
        where = path + ("correlation", "properties", key)
        value = written
        typed = isinstance(written, dict) and len(written) == 1
        if typed:  # {long: 010} is 8 here and 10 elsewhere; {string: yes} is not a string here
            ((tag, value),) = written.items()
            where += (tag,)
        text = loc.plain(where)
        unclear = yaml_versions.ambiguity(text, value) if text is not None else None
        if unclear is not None:
            message = f"rule {doc['name']!r}: property {key!r} is {yaml_versions.explain(unclear)}"
            yield Diagnostic("warning", "ambiguous-yaml", message, loc.origin(where))
        elif not typed and isinstance(value, int) and not isinstance(value, bool):
            yield Diagnostic(
                "warning",
                "ambiguous-integer",
                f"rule {doc['name']!r}: property {key!r} is a plain integer, sent as long {value}. Correlation "
                f"matching is type-strict, and .NET int and Microsoft's Python SDK send small integers as "
                f"32-bit int: write {{int: {value}}} or {{long: {value}}} to say which",
                loc.origin(where),
            )
        elif typed:
            yield from _typed_correlation_note(doc["name"], key, written, loc.origin(path + ("correlation", "properties", key)))


def _typed_correlation_note(rule: str, key: str, written: dict, origin: Origin) -> Iterator[Diagnostic]:
    """Which producer types a typed correlation value does not match (matching compares the type too)."""
    try:
        value = read_typed_form(written, finite=True)
    except TypedValueError:
        return  # the schema check or the rule builder reports it
    described = _other_types(value, repr(value.value))
    if described is not None:
        matches, sent = described
        yield Diagnostic(
            "info",
            "typed-correlation",
            f"rule {rule!r}: property {key!r} matches only {matches}: correlation filters compare the type "
            f"as well as the value, so a message whose {key!r} is {sent} does not match",
            origin,
        )


@lru_cache(maxsize=4096)
def _other_types(value: TypedValue, written: str) -> tuple[str, str] | None:
    """How ``value`` reads and the same value in the types it does not match, or None when there are
    none. Cached, by the value and its Python ``written`` form (equal values can read differently:
    decimal 1.0 and 1.00): rule files repeat typed values (``{int: 1}``), and working the types out
    was half the cost of building a correlation rule."""
    others = same_value_other_types(value)
    if not others:
        return None
    return value.describe(), ", ".join(f"{t.value} {_shown(value)}" for t in others)


def _shown(value: TypedValue) -> str:
    return value.describe().split(" ", 1)[1]


def _build_rule(doc: dict, path: DocPath, loc: Located) -> Rule:
    kind = next((k for k in FILTER_KINDS if k in doc), None)  # none: rule_from_doc says so
    filter_origin = None
    if kind is not None:
        filter_origin = text_origin(path + (kind,), loc) if kind == "sql" else loc.origin(path + (kind,))
    return rule_from_doc(
        doc,
        finite=True,
        origin=loc.origin(path),
        filter_origin=filter_origin,
        action_origin=text_origin(path + ("action",), loc) if "action" in doc else None,
    )


def text_origin(path: DocPath, loc: Located) -> Origin:
    """Where the text of a scalar starts: after the quote, or on the line after a block indicator."""
    origin = loc.origin(path)
    style = loc.style(path)
    if style in ("'", '"'):
        return replace(origin, column=origin.column + 1)
    if style in ("|", ">"):
        for number in range(origin.line, len(loc.lines)):
            content = loc.lines[number]
            if content.strip():
                return Origin(origin.file, number + 1, len(content) - len(content.lstrip()) + 1)
    return origin


def build_rule(doc: dict, path: DocPath, loc: Located, diags: list[Diagnostic]) -> Rule | None:
    """The rule a schema-valid rule document declares, or None (and an error in ``diags``)."""
    diags.extend(_ambiguous_scalars(doc, path, loc))
    try:
        return _build_rule(doc, path, loc)
    except (RuleFormError, TypedValueError) as exc:
        message, origin = f"rule {doc['name']!r}: {exc}", loc.origin(path + tuple(getattr(exc, "path", ())))
        if isinstance(exc.__cause__, NonFiniteValueError):
            diags.append(Diagnostic("error", "non-finite", message, origin))
        else:
            diags.append(Diagnostic("error", "rule", message, origin))
        return None


def _owns(doc: Mapping[str, Any], inherited: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The ``owns:`` patterns a document declares, or those it inherits (subscription over topic
    file over project)."""
    written = doc.get("owns")
    return tuple(str(p) for p in written) if isinstance(written, list) else inherited


def outside_owns(
    topic: str, sub: str, rules: Sequence[Rule], owns: tuple[str, ...] | None, diags: list[Diagnostic]
) -> Iterator[Rule]:
    """The declared rules, less those outside the subscription's own ``owns:`` patterns (each an error)."""
    for rule in rules:
        if owned(rule.name, owns):
            yield rule
            continue
        patterns = ", ".join(repr(p) for p in owns or ())
        diags.append(Diagnostic(
            "error", "not-owned",
            f"rule {rule.name!r} of {topic}/{sub} is outside its owns: patterns ({patterns}); sbrules would never "
            "write it: add a pattern that matches it or rename the rule",
            rule.origin, sql=SqlContext(rule.name, 1, 1),
        ))


def topic_from_doc(read: ReadFile, diags: list[Diagnostic], owns: tuple[str, ...] | None = None) -> Topic:
    """The topic a rule file declares: every subscription and rule its schema violations spare
    (rules that cannot be built are errors in ``diags``); ``owns``: the project's ``owns:`` patterns."""
    doc, loc = read.doc, read.loc
    topic_owns = _owns(doc, owns)
    subs = []
    for sub_name, sub_doc in (doc.get("subscriptions") or {}).items():
        sub_path = ("subscriptions", sub_name)
        if sub_path in read.spoiled:
            continue
        sub_doc = sub_doc or {}
        rules: tuple[Rule, ...] | None = None
        if "rules" in sub_doc:
            written = list(enumerate(sub_doc["rules"] or []))
            built = [
                build_rule(rule_doc, sub_path + ("rules", i), loc, diags)
                for i, rule_doc in written
                if sub_path + ("rules", i) not in read.spoiled
            ]
            rules = tuple(r for r in built if r is not None)
            if written and not rules:
                continue  # every rule is in error: "declares no rules" would be one error too many
        sub_owns = _owns(sub_doc, topic_owns)
        if rules is not None:
            rules = tuple(outside_owns(str(doc["topic"]), str(sub_name), rules, sub_owns, diags))
        elif "owns" in sub_doc:
            diags.append(Diagnostic(
                "error", "not-owned", f"subscription {doc['topic']}/{sub_name} declares owns: without rules: "
                "list the rules it owns (rules: [] with allow_empty: true to own none of them)",
                loc.key_origin(sub_path + ("owns",)),
            ))
        subs.append(
            Subscription(
                name=str(sub_name),
                rules=rules,
                allow_empty=sub_doc.get("allow_empty") is True,
                sampling_tap=sub_doc.get("sampling_tap") is True,
                fallthrough=sub_doc.get("fallthrough") is True,
                origin=loc.key_origin(sub_path),
                owns=sub_owns if rules is not None else None,
            )
        )
    return Topic(name=str(doc["topic"]), subscriptions=tuple(subs), origin=loc.origin(("topic",)))


def merge(topics: Iterable[Topic], diags: list[Diagnostic]) -> DesiredState:
    """Merge topics by name (case-insensitive); duplicates of subscriptions or rules are errors."""
    merged: dict[str, Topic] = {}  # by lower-cased name: the first file's topic
    declared: dict[str, dict[str, Subscription]] = {}  # its subscriptions by lower-cased name, in order
    for topic in topics:
        key = name_key(topic.name)
        if key not in merged:
            merged[key] = topic
            declared[key] = {}
        seen = declared[key]
        for sub in topic.subscriptions:
            twin = seen.get(name_key(sub.name))
            if twin is not None:
                diags.append(
                    Diagnostic(
                        "error",
                        "duplicate-subscription",
                        f"subscription {topic.name}/{sub.name} is declared twice{_spelled(twin.name, sub.name)}",
                        sub.origin,
                        related=tuple(o for o in (twin.origin,) if o),
                    )
                )
                continue
            seen[name_key(sub.name)] = _dedupe_rules(topic, sub, diags)
    return DesiredState(
        topics=tuple(replace(topic, subscriptions=tuple(declared[key].values())) for key, topic in merged.items())
    )


def with_fallthrough_rules(state: DesiredState, diags: list[Diagnostic]) -> DesiredState:
    """Give each fall-through subscription its one generated rule (or an error in ``diags``)."""
    return DesiredState(
        topics=tuple(
            replace(topic, subscriptions=tuple(_fallthrough_rules(topic, sub, diags) for sub in topic.subscriptions))
            for topic in state.topics
        )
    )


def with_bystanders(state: DesiredState, bystanders: Mapping[tuple[str, str], Sequence[Rule]]) -> DesiredState:
    """The fall-through rules generated again now that the namespace is read: ``bystanders`` are the
    subscriptions no file mentions, with their live rules; they receive messages too, so the
    fall-through subscription of their topic leaves those out as well. Raises
    :class:`RuleFileErrors` when a filter can no longer be generated."""
    extra: dict[str, list[tuple[str, Sequence[Rule]]]] = {}
    for (topic_name, sub_name), rules in bystanders.items():
        extra.setdefault(name_key(topic_name), []).append((sub_name, rules))
    diags: list[Diagnostic] = []
    topics = []
    for topic in state.topics:
        more = extra.get(name_key(topic.name))
        subs = topic.subscriptions
        if more:
            subs = tuple(
                _generated(topic, sub, [*_receivers(topic, sub), *more], diags) if sub.fallthrough and sub.rules else sub
                for sub in subs
            )
        topics.append(replace(topic, subscriptions=subs))
    if diags:
        raise RuleFileErrors(diags)
    return replace(state, topics=tuple(topics))


def _fallthrough_rules(topic: Topic, sub: Subscription, diags: list[Diagnostic]) -> Subscription:
    if not sub.fallthrough:
        return sub
    if sub.rules is not None:
        return _problem(topic, sub, "sbrules writes its one rule; remove its rules: list", diags)
    if sub.sampling_tap:
        return _problem(topic, sub, "it cannot also be the sampling tap (the tap receives everything)", diags)
    others = [s for s in topic.subscriptions if s is not sub and not s.sampling_tap]
    twin = next((s for s in others if s.fallthrough), None)
    if twin is not None:
        return _problem(topic, sub, f"{twin.name!r} is a fall-through subscription too; a topic has at most one", diags)
    unknown = next((s for s in others if s.rules is None), None)
    if unknown is not None:
        return _problem(
            topic, sub, f"subscription {unknown.name!r} declares no rules, so what it receives is unknown", diags
        )
    return _generated(topic, sub, _receivers(topic, sub), diags)


def _receivers(topic: Topic, fallthrough: Subscription) -> list[tuple[str, Sequence[Rule]]]:
    """The other declared subscriptions whose deliveries the fall-through leaves out (not the tap)."""
    return [(s.name, s.rules or ()) for s in topic.subscriptions if s is not fallthrough and not s.sampling_tap]


def _generated(
    topic: Topic, sub: Subscription, receivers: Sequence[tuple[str, Sequence[Rule]]], diags: list[Diagnostic]
) -> Subscription:
    try:
        text = fallthrough_filter(rule for _, rules in receivers for rule in rules)
    except NotExpressible as exc:
        if exc.rule is None:
            return _problem(topic, sub, exc.cause, diags)
        owner = next(name for name, rules in receivers if exc.rule in rules)
        cause = f"rule {owner}/{exc.rule.name} cannot be expressed: {exc.cause}"
        return _problem(topic, sub, cause, diags, exc.rule.origin or sub.origin)
    return replace(sub, rules=(Rule(FALLTHROUGH_RULE_NAME, SqlFilter(text), origin=sub.origin),))


def _problem(
    topic: Topic, sub: Subscription, message: str, diags: list[Diagnostic], origin: Origin | None = None
) -> Subscription:
    where = f"fall-through subscription {topic.name}/{sub.name}"
    diags.append(Diagnostic("error", "fallthrough", f"{where}: {message}", origin or sub.origin))
    return replace(sub, rules=None)


def _spelled(first: str, again: str) -> str:
    """How a duplicate spelled differently is one name for the service."""
    if first == again:
        return ""
    return f" (as {first!r}: the service compares names ignoring case, character by character)"


def _dedupe_rules(topic: Topic, sub: Subscription, diags: list[Diagnostic]) -> Subscription:
    if sub.rules is None:
        return sub
    seen: dict[str, Rule] = {}
    kept = []
    for rule in sub.rules:
        first = seen.get(name_key(rule.name))
        if first is not None:
            diags.append(
                Diagnostic(
                    "error",
                    "duplicate-rule",
                    f"rule {rule.name!r} is declared twice in {topic.name}/{sub.name}{_spelled(first.name, rule.name)}",
                    rule.origin,
                    related=tuple(o for o in (first.origin,) if o),
                )
            )
            continue
        seen[name_key(rule.name)] = rule
        kept.append(rule)
    return replace(sub, rules=tuple(kept))


def rule_files(paths: Sequence[str | Path], exclude: Collection[Path] = ()) -> list[Path]:
    """Expand directories into their rule files (recursive, sorted, hidden files skipped), leaving
    out routing test files (``*.test.yaml``, also when named) and the files and directories in
    ``exclude`` (resolved paths: the project file, overlays)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix in RULE_FILE_SUFFIXES
                and not is_test_file(p)
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
                and not _excluded(p, exclude)
            )
            out.extend(found)
        elif not is_test_file(path):
            out.append(path)
    return out


def _excluded(path: Path, exclude: Collection[Path]) -> bool:
    if not exclude:
        return False
    resolved = path.resolve()
    return any(resolved == e or e in resolved.parents for e in exclude)


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


#: A step between reading a file and checking it against its schema (e.g. substituting variables).
#: A step before the schema check (an environment's variables): the document it makes, and the paths of
#: the rules it left unusable (their findings already in the diagnostics), which are then skipped.
Prepare = Callable[[Any, Located, list[Diagnostic]], tuple[Any, frozenset[DocPath]]]


@dataclass(frozen=True)
class ReadFile:
    """A rule or overlay file as data, and the subscriptions and rules (by path) that its schema
    violations leave unbuildable; everything else is still built and checked, so that one mistake
    does not hide the others."""

    doc: Any
    loc: Located
    spoiled: frozenset[DocPath] = frozenset()


def _spoiled(path: DocPath, code: str) -> DocPath | None:
    """The part of a rule or overlay file a schema violation at ``path`` leaves unbuildable: the
    file (``()``), a subscription, a rule, or nothing (an unknown key, or a bad value the builder
    does not read)."""
    if path[:1] != ("subscriptions",) or len(path) == 1:
        return None if code == "unknown-key" and not path else ()
    if len(path) >= 4 and path[2] == "rules":
        return None if code == "unknown-key" and len(path) == 4 else path[:4]
    if len(path) == 2:
        return None if code == "unknown-key" else path
    return path[:2] if path[2] == "rules" else None


def read_valid(
    file: Path, diags: list[Diagnostic], schema: str = SCHEMA_NAME, prepare: Prepare | None = None
) -> ReadFile | None:
    """A file's document, prepared and checked against ``schema`` (every violation in ``diags``);
    None when it cannot be read or a violation spoils the whole file."""
    try:
        doc, loc = read_document(file, display_path(file))
    except DocumentError as exc:
        diags.append(exc.diag)
        return None
    spoiled: set[DocPath] = set()
    if prepare is not None:
        doc, unusable = prepare(doc, loc, diags)
        spoiled |= unusable
    for path, finding in schema_diagnostics(doc, loc, schema):
        diags.append(finding)
        part = _spoiled(path, finding.code)
        if part is not None:
            spoiled.add(part)
    if () in spoiled:
        return None
    return ReadFile(doc, loc, frozenset(spoiled))


def load(
    paths: Sequence[str | Path], *, exclude: Collection[Path] = (), prepare: Prepare | None = None,
    owns: tuple[str, ...] | None = None,
) -> LoadResult:
    """Load files and directories, collecting every diagnostic instead of stopping at the first
    (``owns``: the project's ``owns:`` patterns, which topic files and subscriptions may override)."""
    diags: list[Diagnostic] = []
    topics: list[Topic] = []
    files = rule_files(paths, exclude)
    if not files:
        where = ", ".join(map(str, paths)) or "."
        diags.append(Diagnostic("error", "no-files", f"no rule files (*.yaml, *.yml) found in {where}"))
    with paused_gc():
        for file in files:
            read = read_valid(file, diags, prepare=prepare)
            if read is not None:
                topics.append(topic_from_doc(read, diags, owns))
        state = with_fallthrough_rules(merge(topics, diags), diags)
    return LoadResult(state=state, diagnostics=diags, files=len(files))


def load_paths(paths: Sequence[str | Path]) -> DesiredState:
    """Load rule files into a DesiredState, or raise RuleFileErrors listing every located error."""
    result = load(paths)
    if not result.ok:
        raise RuleFileErrors([d for d in result.diagnostics if d.severity == "error"])
    return result.state
