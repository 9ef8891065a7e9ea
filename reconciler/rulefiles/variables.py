"""``${name}`` in rule files, replaced by an environment's typed values before the schema check.

Substitution works on the parsed document, field by field, never on the file's text:

* SQL filters and actions go through :func:`reconciler.sql.template.substitute_sql`: a value
  becomes one literal token (or escaped text inside a string literal), so it cannot change the
  expression's shape;
* a correlation property whose whole value is ``${name}`` takes the variable's typed value
  (``{int: 10}`` stays an int); elsewhere in correlation values and in names a reference is
  replaced by the value's text.

Every reference to an undefined variable is an error at its file:line:column; the caller learns
which variables were used, to warn about the unused ones.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from typing import Any, Callable, Mapping

from reconciler.diagnostics import Diagnostic, SqlContext
from reconciler.model import CORRELATION_ALIASES, CORRELATION_FIELDS, Origin, TypedValue
from reconciler.rulefiles import yaml_versions
from reconciler.rulefiles.loader import text_origin
from reconciler.rulefiles.located import DocPath, Located
from reconciler.rulefiles.project import Variable
from reconciler.sql.template import NAME, Substituted, substitute_sql, substitute_text

_WHOLE = "${"
_ONE_REFERENCE = re.compile(r"\$\{" + NAME + r"\}")


class Substitution:
    """The variables of one environment, applied to documents one after another."""

    def __init__(self, variables: Mapping[str, Variable]):
        self.variables = dict(variables)
        self.values: dict[str, TypedValue] = {name: var.value for name, var in variables.items()}
        self.used: set[str] = set()

    def __call__(self, doc: Any, loc: Located, diags: list[Diagnostic]) -> tuple[Any, frozenset[DocPath]]:
        """The document with every reference replaced (the loader's ``prepare`` step), and the rules
        whose SQL still holds a bad reference: its `variable` error says all, so their SQL is not
        also parsed (it would add a syntax error at the same place)."""
        if not isinstance(doc, dict):
            return doc, frozenset()
        document = _Document(self, loc, diags)
        return document.rule_file(doc), frozenset(document.unusable)

    def test_file(self, doc: Any, loc: Located, diags: list[Diagnostic]) -> tuple[Any, frozenset[DocPath]]:
        """A routing test file (``sbrules test``) with every reference replaced: in topic and
        subscription names, rule names and message property values (typed, as in correlation
        filters)."""
        if not isinstance(doc, dict):
            return doc, frozenset()
        return _Document(self, loc, diags).test_file(doc), frozenset()

    def suggestion(self, name: str) -> str:
        """``; did you mean 'x'?`` for an undefined name close to a defined variable's, else nothing.
        The variable suggested counts as used: the misspelt reference was meant for it, and an
        ``unused-variable`` warning about it would only repeat the error."""
        if name in self.variables:
            return ""
        close = difflib.get_close_matches(name, list(self.variables), n=1, cutoff=0.6)
        if not close:
            return ""
        self.used.add(close[0])
        return f"; did you mean {close[0]!r}?"


class _Document:
    def __init__(self, sub: Substitution, loc: Located, diags: list[Diagnostic]):
        self.sub, self.loc, self.diags = sub, loc, diags
        #: Rule paths whose SQL keeps a reference that could not be substituted.
        self.unusable: set[DocPath] = set()

    def rule_file(self, doc: dict) -> dict:
        out = dict(doc)
        if isinstance(doc.get("topic"), str):
            out["topic"] = self.text(doc["topic"], ("topic",))
        subs = doc.get("subscriptions")
        if isinstance(subs, dict):
            out["subscriptions"] = self.keyed(subs, ("subscriptions",), self.subscription)
        return out

    def test_file(self, doc: dict) -> dict:
        out = dict(doc)
        if isinstance(doc.get("topic"), str):
            out["topic"] = self.text(doc["topic"], ("topic",))
        if isinstance(doc.get("messages"), dict):
            out["messages"] = {k: self.message(v, ("messages", k)) for k, v in doc["messages"].items()}
        if isinstance(doc.get("cases"), list):
            out["cases"] = [self.case(case, ("cases", i)) for i, case in enumerate(doc["cases"])]
        return out

    def case(self, doc: Any, path: DocPath) -> Any:
        if not isinstance(doc, dict):
            return doc
        out = dict(doc)
        if isinstance(doc.get("topic"), str):
            out["topic"] = self.text(doc["topic"], path + ("topic",))
        out["given"] = self.message(doc.get("given"), path + ("given",))
        expect = doc.get("expect")
        if isinstance(expect, dict):
            expect = dict(expect)
            for key in ("only", "includes", "excludes"):
                if isinstance(expect.get(key), list):
                    where = path + ("expect", key)
                    expect[key] = [self.text(n, where + (i,)) if isinstance(n, str) else n for i, n in enumerate(expect[key])]
            if isinstance(expect.get("copies"), dict):
                expect["copies"] = self.keyed(expect["copies"], path + ("expect", "copies"), self.copies)
            out["expect"] = expect
        return out

    def copies(self, listed: Any, path: DocPath) -> Any:
        if not isinstance(listed, list):
            return listed
        out = []
        for i, copy in enumerate(listed):
            copy = self.message(copy, path + (i,))
            if isinstance(copy, dict) and isinstance(copy.get("rule"), str):
                copy = {**copy, "rule": self.text(copy["rule"], path + (i, "rule"))}
            out.append(copy)
        return out

    def message(self, doc: Any, path: DocPath) -> Any:
        if not isinstance(doc, dict):
            return doc
        out = dict(doc)
        for scope in ("sys", "user"):
            if isinstance(doc.get(scope), dict):
                out[scope] = self.keyed(doc[scope], path + (scope,), self.property_value)
        return out

    def subscription(self, doc: Any, path: DocPath) -> Any:
        if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
            return doc
        rules = [self.rule(rule, path + ("rules", i)) for i, rule in enumerate(doc["rules"])]
        return {**doc, "rules": rules}

    def rule(self, doc: Any, path: DocPath) -> Any:
        if not isinstance(doc, dict):
            return doc
        out = dict(doc)
        if isinstance(doc.get("name"), str):
            out["name"] = self.text(doc["name"], path + ("name",))
        for key in ("sql", "action"):
            if isinstance(doc.get(key), str):
                out[key] = self.sql(doc[key], path + (key,))
        if isinstance(doc.get("correlation"), dict):
            out["correlation"] = self.correlation(doc["correlation"], path + ("correlation",))
        return out

    def correlation(self, doc: dict, path: DocPath) -> dict:
        out = dict(doc)
        for key, value in doc.items():
            if CORRELATION_ALIASES.get(key, key) in CORRELATION_FIELDS and isinstance(value, str):
                out[key] = self.text(value, path + (key,))
        props = doc.get("properties")
        if isinstance(props, dict):
            out["properties"] = self.keyed(props, path + ("properties",), self.property_value)
        return out

    def property_value(self, value: Any, path: DocPath) -> Any:
        if isinstance(value, str) and value.startswith(_WHOLE) and _is_one_reference(value):
            name = value[2:-1]
            self.sub.used.add(name)
            found = self.sub.variables.get(name)
            if found is None:
                self.problem(path, value, 0, len(value), f"undefined variable {name!r}{self.sub.suggestion(name)}")
                return value
            if found.unclear is not None:
                self.unclear(path, found)
            return found.value.to_typed_form(explicit=True)
        if isinstance(value, str):
            return self.text(value, path)
        if isinstance(value, dict) and len(value) == 1:
            (tag, inner), = value.items()
            if isinstance(inner, str):
                return {tag: self.text(inner, path + (tag,))}
        return value

    def unclear(self, path: DocPath, var: Variable) -> None:
        """A correlation property whose whole value is a variable written as an ambiguous scalar."""
        assert var.unclear is not None
        where = f"{var.origin.file}:{var.origin.line}:{var.origin.column}"
        message = (
            f"property {path[-1]!r} is ${{{var.name}}}, and variable {var.name!r} ({where}) is "
            f"{yaml_versions.explain(var.unclear)} in the project file"
        )
        self.diags.append(Diagnostic("warning", "ambiguous-yaml", message, text_origin(path, self.loc)))

    def keyed(self, mapping: dict, path: DocPath, each: Callable[[Any, DocPath], Any]) -> dict:
        """A mapping whose keys are names (subscriptions, properties): keys and values substituted."""
        out = {}
        for key, value in mapping.items():
            new_key = self.text(key, path + (key,), is_key=True) if isinstance(key, str) else key
            if new_key != key:
                _move(self.loc, path + (key,), path + (new_key,))
            out[new_key] = each(value, path + (new_key,))
        return out

    # -- one string ------------------------------------------------------------------------------
    def text(self, value: str, path: DocPath, is_key: bool = False) -> str:
        if "$" not in value:
            return value
        result = substitute_text(value, self.sub.values.get)
        return self.finish(result, path, value, is_key)

    def sql(self, value: str, path: DocPath) -> str:
        if "$" not in value:
            return value
        result = substitute_sql(value, self.sub.values.get)
        return self.finish(result, path, value, False, sql=True)

    def finish(self, result: Substituted, path: DocPath, written: str, is_key: bool, sql: bool = False) -> str:
        self.sub.used.update(result.used)
        for problem in result.problems:
            message = problem.message + (self.sub.suggestion(problem.name) if problem.name else "")
            self.problem(path, written, problem.offset, problem.length, message, is_key=is_key, sql=sql)
        if sql and result.problems and path[:1] == ("subscriptions",) and len(path) >= 4:
            self.unusable.add(path[:4])
        return result.text

    def problem(
        self, path: DocPath, text: str, offset: int, length: int, message: str, *, is_key: bool = False, sql: bool = False
    ) -> None:
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        start = self.loc.key_origin(path) if is_key else text_origin(path, self.loc)
        origin = (
            replace(start, column=start.column + column - 1)
            if line == 1
            else Origin(start.file, start.line + line - 1, start.column + column - 1)
        )
        self.diags.append(
            Diagnostic("error", "variable", message, origin, sql=SqlContext(text, line, column) if sql else None)
        )


def _is_one_reference(value: str) -> bool:
    return _ONE_REFERENCE.fullmatch(value) is not None


def _move(loc: Located, old: DocPath, new: DocPath) -> None:
    """Keep the marks of a renamed key's subtree reachable under its new name."""
    size = len(old)
    tables: tuple[dict[DocPath, Any], ...] = (loc.values, loc.keys)
    for table in tables:
        for path in [p for p in table if p[:size] == old]:
            table[new + path[size:]] = table[path]
