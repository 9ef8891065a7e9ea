"""Routing test files (``*.test.yaml``) → test cases, with every problem located at file:line:column.

A file is read like a rule file (``rulefiles.located``), checked against
``schemas/rule-tests.schema.json`` (every violation), and each case built into a message and its
expectations. A case the schema or the message reader refuses is left out with a located error;
the others still run, so one mistake does not hide the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from reconciler.diagnostics import Diagnostic
from reconciler.model import Message, Origin, TypedValue, TypedValueError
from reconciler.rulefiles.loader import Prepare, display_path, is_test_file
from reconciler.rulefiles.located import DocPath, DocumentError, Located, read_document, read_quickly
from reconciler.rulefiles.schema import schema_diagnostics

SCHEMA_NAME = "rule-tests.schema.json"


@dataclass(frozen=True)
class ExpectedCopy:
    """A copy a subscription must receive: made by ``rule`` (None: the unchanged copy), carrying at
    least these properties with these values."""

    rule: str | None
    sys: Mapping[str, TypedValue]
    user: Mapping[str, TypedValue]
    origin: Origin


@dataclass(frozen=True)
class Expectation:
    """What must be true of where a case's message goes (None / empty: not checked)."""

    only: tuple[str, ...] | None = None
    includes: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    unrouted: bool | None = None
    copies: Mapping[str, tuple[ExpectedCopy, ...]] = field(default_factory=dict)

    def named(self) -> list[str]:
        """Every subscription the expectation names, in the order written."""
        names = [*(self.only or ()), *self.includes, *self.excludes, *self.copies]
        return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Case:
    """One routing test: a message published to ``topic`` and what must happen to it."""

    name: str
    topic: str
    message: Message
    expect: Expectation
    origin: Origin
    envs: tuple[str, ...] = ()
    #: Where the message's properties were written, by (scope, name), for located warnings (each
    #: place found when asked).
    property_origins: Mapping[tuple[str, str], Origin] = field(default_factory=dict, compare=False)
    #: The test file and the case's index in its ``cases`` (for ``--update``).
    file: Path | None = None
    index: int = -1


def test_files(paths: Sequence[Path]) -> list[Path]:
    """The test files named in ``paths`` and found under its directories (recursive, sorted,
    hidden files skipped)."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(
                sorted(
                    p for p in path.rglob("*")
                    if is_test_file(p) and p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
                )
            )
        elif is_test_file(path):
            out.append(path)
    return list(dict.fromkeys(out))


def read_cases(files: Sequence[Path], diags: list[Diagnostic], prepare: Prepare | None = None) -> list[Case]:
    """Every well-formed case of ``files``; each problem found goes to ``diags``. ``prepare`` runs
    before the schema check (an environment's variables: ``Substitution.test_file``)."""
    cases: list[Case] = []
    for file in files:
        display = display_path(file)
        # The quick reader where no environment rewrites the file (which needs the table of places).
        quick = read_quickly(file, display) if prepare is None else None
        try:
            doc, loc = quick if quick is not None else read_document(file, display)
        except DocumentError as exc:
            diags.append(exc.diag)
            continue
        if prepare is not None:
            doc, _unusable = prepare(doc, loc, diags)
        violations = schema_diagnostics(doc, loc, SCHEMA_NAME)
        diags.extend(finding for _path, finding in violations)
        spoiled = {_case_of(path) for path, _ in violations}
        if None in spoiled or not isinstance(doc, dict):
            continue
        shared = doc.get("messages") or {}
        for index, case_doc in enumerate(doc.get("cases") or ()):
            if index in spoiled:
                continue
            case = _case(case_doc, ("cases", index), doc.get("topic"), shared, loc, diags, file)
            if case is not None:
                cases.append(case)
    return cases


def _case_of(path: DocPath) -> int | None:
    """The index of the case a schema violation at ``path`` spoils; None when it spoils the file."""
    if len(path) >= 2 and path[0] == "cases":
        return int(path[1])
    return None


def _case(
    doc: dict, path: DocPath, default_topic: str | None, shared: Mapping[str, Any], loc: Located, diags: list[Diagnostic],
    file: Path,
) -> Case | None:
    origin = loc.origin(path)
    topic = doc.get("topic", default_topic)
    if topic is None:
        problem = f"case {doc['name']!r} names no topic (give `topic:` in the case or the file)"
        diags.append(Diagnostic("error", "test-topic", problem, origin))
        return None
    given = dict(doc["given"])
    given_path = path + ("given",)
    like = given.pop("like", None)
    if like is not None:
        base = shared.get(like)
        if base is None:
            known = ", ".join(sorted(shared)) or "none"
            diags.append(
                Diagnostic("error", "test-like", f"case {doc['name']!r}: no shared message {like!r} (messages: {known})",
                           loc.origin(given_path + ("like",)))
            )
            return None
        given = {
            "sys": {**(base.get("sys") or {}), **(given.get("sys") or {})},
            "user": {**(base.get("user") or {}), **(given.get("user") or {})},
            "body": given.get("body", base.get("body")),
        }
    try:
        message = Message.from_json({k: v for k, v in given.items() if v is not None})
    except TypedValueError as exc:
        diags.append(Diagnostic("error", "test-message", f"case {doc['name']!r}: {exc}", loc.origin(given_path)))
        return None
    expect = _expectation(doc["expect"], path + ("expect",), doc["name"], loc, diags)
    if expect is None:
        return None
    names = [(scope, name) for scope in ("sys", "user") for name in (given.get(scope) or {})]
    places = _Places(loc, given_path, names, origin)
    return Case(doc["name"], topic, message, expect, origin, tuple(doc.get("env") or ()), places, file, path[1])


class _Places(Mapping[tuple[str, str], Origin]):
    """Where each property of a case's message was written (the case's own place for one it took
    from a shared message), found only when a warning asks."""

    def __init__(self, loc: Located, given: DocPath, names: list[tuple[str, str]], fallback: Origin):
        self._loc, self._given, self._names, self._fallback = loc, given, names, fallback

    def __getitem__(self, key: tuple[str, str]) -> Origin:
        if key not in self._names:
            raise KeyError(key)
        path = self._given + key
        return self._loc.key_origin(path) if self._loc.key_node(path) is not None else self._fallback

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _expectation(doc: dict, path: DocPath, name: str, loc: Located, diags: list[Diagnostic]) -> Expectation | None:
    copies: dict[str, tuple[ExpectedCopy, ...]] = {}
    for sub, listed in (doc.get("copies") or {}).items():
        made = []
        for index, copy in enumerate(listed):
            where = loc.origin(path + ("copies", sub, index))
            try:
                props = Message.from_json({"sys": copy.get("sys") or {}, "user": copy.get("user") or {}})
            except TypedValueError as exc:
                diags.append(Diagnostic("error", "test-message", f"case {name!r}: copy for {sub!r}: {exc}", where))
                return None
            made.append(ExpectedCopy(copy.get("rule"), props.sys, props.user, where))
        copies[sub] = tuple(made)
    only = doc.get("only")
    return Expectation(
        only=tuple(only) if only is not None else None,
        includes=tuple(doc.get("includes") or ()),
        excludes=tuple(doc.get("excludes") or ()),
        unrouted=doc.get("unrouted"),
        copies=copies,
    )
