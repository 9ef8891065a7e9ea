"""A YAML document as plain data, plus where each value and key was written.

YAML is composed into nodes, which keep their marks, and converted to plain data (only the plain
scalar tags, bounded size and depth) while a side table records the file:line:column of every
value and key, so that schema and model errors can point at the exact place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reconciler.diagnostics import Diagnostic
from reconciler.model import Origin

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

#: Where a value sits in a document: the keys and list indexes from the root.
DocPath = tuple[Any, ...]


class Located:
    """Plain data converted from YAML nodes, and where each value and key was written."""

    def __init__(self, file: str):
        self.file = file
        self.values: dict[DocPath, Origin] = {}
        self.keys: dict[DocPath, Origin] = {}
        self.styles: dict[DocPath, str | None] = {}
        #: The text of each plain (unquoted) scalar as written, before YAML resolved its type.
        self.plain: dict[DocPath, str] = {}
        self.lines: list[str] = []
        self.nodes = 0

    def origin(self, path: DocPath) -> Origin:
        """The closest recorded place for ``path`` (falls back to its parents)."""
        probe = tuple(path)
        while probe:
            if probe in self.values:
                return self.values[probe]
            probe = probe[:-1]
        return self.values.get((), Origin(self.file, 1, 1))

    def key_origin(self, path: DocPath) -> Origin:
        return self.keys.get(tuple(path)) or self.origin(path)

    def mark(self, node: yaml.Node) -> Origin:
        return Origin(self.file, node.start_mark.line + 1, node.start_mark.column + 1)


class DocumentError(Exception):
    """The file cannot be read as a rule document at all; ``diag`` says where and why."""

    def __init__(self, diag: Diagnostic):
        super().__init__(diag.message)
        self.diag = diag


def _convert(node: yaml.Node, path: DocPath, loc: Located, depth: int = 0) -> Any:
    loc.nodes += 1
    origin = loc.mark(node)
    if loc.nodes > MAX_NODES or depth > MAX_DEPTH:
        raise DocumentError(
            Diagnostic("error", "yaml", "document too large or too deeply nested (aliases expanded)", origin)
        )
    loc.values[path] = origin
    if isinstance(node, yaml.ScalarNode):
        loc.styles[path] = node.style
        if not node.style:  # None from PyYAML, '' from libyaml
            loc.plain[path] = node.value
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value  # keep dates as written; typed values say {timestamp: ...} explicitly
        if node.tag not in _PLAIN_TAGS:
            raise DocumentError(Diagnostic("error", "yaml", f"unsupported YAML tag {node.tag}", origin))
        return _scalar_constructor.construct_object(node)
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, path + (i,), loc, depth + 1) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_origin = loc.mark(key_node)
            if not isinstance(key_node, yaml.ScalarNode):
                raise DocumentError(Diagnostic("error", "yaml", "mapping keys must be plain names", key_origin))
            key = key_node.value
            if key in out:
                first = loc.keys[path + (key,)]
                message = f"key {key!r} appears twice in one mapping"
                raise DocumentError(Diagnostic("error", "duplicate-key", message, key_origin, related=(first,)))
            loc.keys[path + (key,)] = key_origin
            out[key] = _convert(value_node, path + (key,), loc, depth + 1)
        return out
    raise DocumentError(Diagnostic("error", "yaml", "unsupported YAML node", origin))  # pragma: no cover


def read_document(file: Path, display: str) -> tuple[Any, Located]:
    loc = Located(display)
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
    loc.lines = text.splitlines()
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        origin = Origin(display, mark.line + 1, mark.column + 1) if mark else Origin(display, 1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        raise DocumentError(Diagnostic("error", "yaml", f"malformed YAML: {problem}", origin)) from None
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

