"""A YAML document as plain data, plus where each value and key was written.

YAML is composed into nodes, which keep their marks, and converted to plain data (only the plain
scalar tags, bounded size and depth) while a side table keeps the node of every value and key by
its path, so that schema and model errors can point at the exact place. The table holds the
composed nodes themselves rather than locations made from them: a location is made only when a
finding or a rule asks for one (at 100,000 rules, making one for each of 1.1 million nodes cost
more than composing them).
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import yaml

from reconciler.diagnostics import Diagnostic
from reconciler.model import Origin

MAX_NODES = 200_000
MAX_DEPTH = 64

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_DEFAULT_TAGS = {
    yaml.ScalarNode: yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG,
    yaml.SequenceNode: yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
    yaml.MappingNode: yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
}
_resolver = yaml.resolver.Resolver()


@lru_cache(maxsize=8192)
def plain_tag(text: str) -> str:
    """The tag YAML 1.1 gives the plain scalar ``text``."""
    return _resolver.resolve(yaml.ScalarNode, text, (True, False))


class _Loader(_SafeLoader):  # type: ignore[misc, valid-type]
    """The safe loader, with the tag resolution it calls back into Python for at every node cut to
    what a safe loader needs. It has no path resolvers, so descending and ascending do nothing and
    every node but a plain scalar gets its kind's default tag; a plain scalar's tag depends on its
    text alone, so each distinct text is resolved once. At 100,000 rules composing took 1.22 s
    instead of 1.56 s (best of five)."""

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return plain_tag(value)
        return _DEFAULT_TAGS[kind]


_STR = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
#: The constructor of each plain scalar tag. They read only the node, so one constructor serves
#: every file (its ``construct_object`` would remember every node it was given, for ever).
_CONSTRUCTORS = {
    tag: yaml.constructor.SafeConstructor.yaml_constructors[tag]
    for tag in (
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:null",
    )
}
_constructor = yaml.constructor.SafeConstructor()

#: Where a value sits in a document: the keys and list indexes from the root.
DocPath = tuple[Any, ...]


class Located:
    """Plain data converted from YAML nodes, and where each value and key was written."""

    def __init__(self, file: str, text: str = ""):
        self.file = file
        self.text = text
        #: The node each value was read from, and the node of each mapping key, by path.
        self.values: dict[DocPath, yaml.Node] = {}
        self.keys: dict[DocPath, yaml.Node] = {}
        self.nodes = 0

    @cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def node(self, path: DocPath) -> yaml.Node | None:
        """The node the value at ``path`` was read from."""
        return self.values.get(path)

    def key_node(self, path: DocPath) -> yaml.Node | None:
        """The node of the mapping key that ends ``path``."""
        return self.keys.get(path)

    def origin(self, path: DocPath) -> Origin:
        """The closest recorded place for ``path`` (falls back to its parents)."""
        probe = tuple(path)
        while probe:
            node = self.node(probe)
            if node is not None:
                return self.mark(node)
            probe = probe[:-1]
        root = self.node(())
        return self.mark(root) if root is not None else Origin(self.file, 1, 1)

    def key_origin(self, path: DocPath) -> Origin:
        node = self.key_node(tuple(path))
        return self.mark(node) if node is not None else self.origin(path)

    def style(self, path: DocPath) -> str | None:
        """How the scalar at ``path`` was written: a quote, ``|`` or ``>``; None when plain or not a scalar."""
        node = self.node(path)
        return node.style or None if isinstance(node, yaml.ScalarNode) else None

    def plain(self, path: DocPath) -> str | None:
        """The text of the plain (unquoted) scalar at ``path`` as written, before YAML resolved its type."""
        node = self.node(path)
        return node.value if isinstance(node, yaml.ScalarNode) and not node.style else None

    def mark(self, node: yaml.Node) -> Origin:
        return Origin(self.file, node.start_mark.line + 1, node.start_mark.column + 1)


class DocumentError(Exception):
    """The file cannot be read as a rule document at all; ``diag`` says where and why."""

    def __init__(self, diag: Diagnostic):
        super().__init__(diag.message)
        self.diag = diag


class NodeTree(Located):
    """Places in a document read by :func:`read_quickly`: no tables, the node at a path is found by
    walking from the root when a finding or a case asks for it."""

    def __init__(self, file: str, text: str, root: yaml.Node):
        super().__init__(file, text)
        self.root = root

    def node(self, path: DocPath) -> yaml.Node | None:
        return self._walk(path)[0]

    def key_node(self, path: DocPath) -> yaml.Node | None:
        return self._walk(path)[1]

    def _walk(self, path: DocPath) -> tuple[yaml.Node | None, yaml.Node | None]:
        """The node at ``path``, and the key node that ends it (None: not a mapping's value)."""
        node: yaml.Node = self.root
        key: yaml.Node | None = None
        for step in path:
            kind = type(node)
            if kind is yaml.MappingNode:
                for key_node, value_node in node.value:
                    if key_node.value == step:
                        node, key = value_node, key_node
                        break
                else:
                    return None, None
            elif kind is yaml.SequenceNode and type(step) is int and 0 <= step < len(node.value):
                node, key = node.value[step], None
            else:
                return None, None
        return node, key


#: What :func:`_scalar` returns for a tag the reader does not take.
_UNSUPPORTED = object()


def _scalar(node: yaml.ScalarNode) -> Any:
    """The plain value of a scalar, or _UNSUPPORTED for a tag other than the plain scalar ones."""
    tag = node.tag
    if tag in (_STR, _TIMESTAMP):  # keep dates as written; typed values say {timestamp: ...}
        return node.value
    construct = _CONSTRUCTORS.get(tag)
    return _UNSUPPORTED if construct is None else construct(_constructor, node)


def _convert(node: yaml.Node, path: DocPath, loc: Located, depth: int = 0) -> Any:
    loc.nodes += 1
    if loc.nodes > MAX_NODES or depth > MAX_DEPTH:
        raise DocumentError(
            Diagnostic("error", "yaml", "document too large or too deeply nested (aliases expanded)", loc.mark(node))
        )
    loc.values[path] = node
    kind = type(node)
    if kind is yaml.ScalarNode:
        value = _scalar(node)
        if value is _UNSUPPORTED:
            raise DocumentError(Diagnostic("error", "yaml", f"unsupported YAML tag {node.tag}", loc.mark(node)))
        return value
    if kind is yaml.SequenceNode:
        return [_convert(item, path + (i,), loc, depth + 1) for i, item in enumerate(node.value)]
    if kind is yaml.MappingNode:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if type(key_node) is not yaml.ScalarNode:
                raise DocumentError(Diagnostic("error", "yaml", "mapping keys must be plain names", loc.mark(key_node)))
            key = key_node.value
            where = path + (key,)
            if key in out:
                message = f"key {key!r} appears twice in one mapping"
                first = loc.key_origin(where)
                raise DocumentError(
                    Diagnostic("error", "duplicate-key", message, loc.mark(key_node), related=(first,))
                )
            loc.keys[where] = key_node
            out[key] = _convert(value_node, where, loc, depth + 1)
        return out
    raise DocumentError(Diagnostic("error", "yaml", "unsupported YAML node", loc.mark(node)))  # pragma: no cover


def read_document(file: Path, display: str) -> tuple[Any, Located]:
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise DocumentError(Diagnostic("error", "io", f"cannot read file: {exc.strerror}", Origin(display, 1, 1))) from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DocumentError(Diagnostic("error", "encoding", "file is not valid UTF-8", Origin(display, line, column))) from None
    loc = Located(display, text)
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        origin = Origin(display, mark.line + 1, mark.column + 1) if mark else Origin(display, 1, 1)
        raise DocumentError(Diagnostic("error", "yaml", f"malformed YAML: {yaml_problem(exc, text)}", origin)) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        message = "document too deeply nested" if isinstance(exc, RecursionError) else f"malformed YAML: {exc}"
        raise DocumentError(Diagnostic("error", "yaml", message, Origin(display, 1, 1))) from None
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        raise DocumentError(
            Diagnostic("error", "empty", "file declares nothing: expected a mapping with a 'topic' key", Origin(display, 1, 1))
        )
    if len(nodes) > 1:
        raise DocumentError(
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
        raise DocumentError(Diagnostic("error", "yaml", "document too deeply nested", Origin(display, 1, 1))) from None


class _Unusual(Exception):
    """Something :func:`read_quickly` leaves to :func:`read_document`, which says where and why."""


def read_quickly(file: Path, display: str) -> tuple[Any, Located] | None:
    """What :func:`read_document` returns for a document it reads without a finding, made faster:
    plain data without the table of places (a :class:`NodeTree` finds one when asked). None for a
    document with anything :func:`read_document` would report, to be read with it: 10,000 routing
    test cases read in 0.3 s instead of 0.55 s."""
    try:
        text = file.read_bytes().decode("utf-8-sig")
        root = yaml.compose(text, Loader=_Loader)
        if root is None:
            return None
        return _plain(root, 0, [0]), NodeTree(display, text, root)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError, _Unusual):
        return None


def _plain(node: yaml.Node, depth: int, count: list[int]) -> Any:
    """:func:`_convert` without the places (``count``: the nodes so far), raising _Unusual where it
    would raise DocumentError."""
    count[0] += 1
    if count[0] > MAX_NODES or depth > MAX_DEPTH:
        raise _Unusual
    kind = type(node)
    if kind is yaml.ScalarNode:
        value = _scalar(node)
        if value is _UNSUPPORTED:
            raise _Unusual
        return value
    if kind is yaml.SequenceNode:
        return [_plain(item, depth + 1, count) for item in node.value]
    if kind is not yaml.MappingNode:
        raise _Unusual
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        if type(key_node) is not yaml.ScalarNode or key_node.value in out:
            raise _Unusual
        out[key_node.value] = _plain(value_node, depth + 1, count)
    return out


def yaml_problem(exc: yaml.MarkedYAMLError, text: str) -> str:
    """PyYAML's finding in one line, with its context ("while scanning a quoted scalar at line 7,
    column 15") and the offending character named where it is one a reader cannot see (a tab)."""
    parts = []
    if exc.context:
        where = exc.context_mark
        parts.append(f"{exc.context} at line {where.line + 1}, column {where.column + 1}" if where else exc.context)
    problem = exc.problem or "malformed YAML"
    mark = exc.problem_mark
    if mark is not None and 0 <= mark.index < len(text):
        char = text[mark.index]
        if char == "\t":
            problem += " (a tab: YAML indents with spaces only)"
        elif not char.isprintable() and char not in "\r\n":
            problem += f" (the character U+{ord(char):04X})"
    parts.append(problem)
    return ": ".join(parts)
