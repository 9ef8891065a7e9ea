"""The project file, ``sbrules.yaml``: the environments one rule set is applied to.

It sits at the root of the rule directory and is found as git finds ``.git``: in the given PATH
or one of its parents. Each environment names its namespace (an environment variable holding a
connection string, or an endpoint for Entra ID — never a secret), the values of its
``${variables}``, overlay rule files and topic renames. It is read like a rule file: plain data
with marks, checked against ``schemas/project.schema.json``, every problem located.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from reconciler.diagnostics import Diagnostic
from reconciler.errors import UsageError
from reconciler.model import NonFiniteValueError, Origin, TypedValue, TypedValueError
from reconciler.names import name_key, same_name
from reconciler.owners import NO_OWNERS, Owners
from reconciler.rulefiles.loader import RuleFileErrors, display_path, read_valid
from reconciler.rulefiles.located import Located
from reconciler.rulefiles.yaml_versions import Ambiguity, ambiguity

log = logging.getLogger("reconciler.rulefiles.project")

PROJECT_FILES = ("sbrules.yaml", "sbrules.yml")
PROJECT_SCHEMA = "project.schema.json"


@dataclass(frozen=True)
class Variable:
    name: str
    value: TypedValue
    origin: Origin
    #: Set when the value is a plain YAML scalar other readers take for another type (``yes``).
    unclear: Ambiguity | None = None


@dataclass(frozen=True)
class Overlay:
    """An overlay entry: a directory or file of overlay rule files, resolved against the project."""

    path: Path
    written: str
    origin: Origin


@dataclass(frozen=True)
class Rename:
    """``topics: {declared: actual}``: the declared topic's name in this environment's namespace."""

    declared: str
    actual: str
    origin: Origin


@dataclass(frozen=True)
class Environment:
    name: str
    origin: Origin
    connection_string_env: str | None = None
    endpoint: str | None = None
    auth: str | None = None
    #: The management REST API's URL when it is not https://<namespace host>.
    management_endpoint: str | None = None
    vars: Mapping[str, Variable] = field(default_factory=dict)
    overlays: tuple[Overlay, ...] = ()
    renames: tuple[Rename, ...] = ()

    def actual_topic(self, declared: str) -> str:
        """A declared topic's name in this environment's namespace."""
        return next((r.actual for r in self.renames if same_name(r.declared, declared)), declared)

    def declared_topic(self, actual: str) -> str:
        """The declared name of a topic of this environment's namespace."""
        return next((r.declared for r in self.renames if same_name(r.actual, actual)), actual)

    @property
    def names_namespace(self) -> bool:
        """Whether the environment says which namespace it is (otherwise the command line does)."""
        return bool(self.connection_string_env or self.endpoint)


@dataclass(frozen=True)
class Project:
    file: Path
    environments: Mapping[str, Environment]
    #: The ``owns:`` patterns of every subscription that declares rules, unless overridden.
    owns: tuple[str, ...] | None = None
    #: ``owners:``: owner name → ``TOPIC/SUBSCRIPTION[/RULE]`` glob patterns.
    owners: Owners = NO_OWNERS

    @property
    def root(self) -> Path:
        return self.file.parent

    def environment(self, name: str) -> Environment:
        env = self.environments.get(name)
        if env is None:
            known = ", ".join(self.environments)
            raise UsageError(f"environment {name!r} is not defined in {display_path(self.file)} (defined: {known})")
        return env

    def not_base_files(self) -> set[Path]:
        """What is never read as a base rule file: the project file and every environment's overlays."""
        out = {self.file.resolve()}
        for env in self.environments.values():
            out.update(overlay.path.resolve() for overlay in env.overlays)
        return out


def find_project(start: Path) -> Path | None:
    """The project file in ``start`` (a directory, or a file's directory) or the nearest parent, up to
    the repository's root (the directory holding ``.git``) and never beyond: an sbrules.yaml above the
    repository belongs to another project (a home directory, a monorepo's neighbour)."""
    here = start.resolve()
    if not here.is_dir():
        here = here.parent
    for directory in (here, *here.parents):
        for name in PROJECT_FILES:
            candidate = directory / name
            if candidate.is_file():
                return candidate
        if (directory / ".git").exists():
            return None
    return None


def read_project(file: Path) -> Project:
    """Read and check the project file; RuleFileErrors lists every located error."""
    log.debug("using the project file %s", file)
    diags: list[Diagnostic] = []
    read = read_valid(file, diags, PROJECT_SCHEMA)
    if read is None or diags:
        raise RuleFileErrors(diags)
    doc, loc = read.doc, read.loc
    environments = {
        str(name): _environment(str(name), env_doc or {}, ("environments", name), file.parent, loc, diags)
        for name, env_doc in doc["environments"].items()
    }
    if diags:
        raise RuleFileErrors(diags)
    owns = tuple(str(p) for p in doc["owns"]) if "owns" in doc else None
    owners = {str(name): tuple(str(p) for p in patterns) for name, patterns in (doc.get("owners") or {}).items()}
    return Project(file=file, environments=environments, owns=owns, owners=Owners(owners))


def _environment(
    name: str, doc: Mapping[str, Any], path: tuple, root: Path, loc: Located, diags: list[Diagnostic]
) -> Environment:
    where = f"environment {name!r}"
    if "connection_string_env" in doc and "endpoint" in doc:
        diags.append(
            Diagnostic("error", "environment", f"{where}: give connection_string_env or endpoint, not both",
                       loc.key_origin(path + ("endpoint",)))
        )
    if "endpoint" in doc and doc.get("auth") != "entra":
        diags.append(
            Diagnostic("error", "environment",
                       f"{where}: an endpoint carries no key, so it needs auth: entra; for SAS name the variable "
                       "holding the connection string with connection_string_env",
                       loc.key_origin(path + ("endpoint",)))
        )
    variables = {}
    for var_name, raw in (doc.get("vars") or {}).items():
        var_path = path + ("vars", var_name)
        try:
            text = loc.plain(var_path)
            unclear = ambiguity(text, raw) if text is not None else None
            value = TypedValue.from_typed_form(raw, finite=True)
            variables[var_name] = Variable(var_name, value, loc.key_origin(var_path), unclear)
        except TypedValueError as exc:
            message, origin = f"{where}: variable {var_name!r}: {exc}", loc.origin(var_path)
            if isinstance(exc, NonFiniteValueError):
                diags.append(Diagnostic("error", "non-finite", message, origin))
            else:
                diags.append(Diagnostic("error", "typed-value", message, origin))
    overlays = []
    for index, written in enumerate(doc.get("overlays") or ()):
        origin = loc.origin(path + ("overlays", index))
        resolved = (root / written).resolve()
        if not resolved.exists():
            diags.append(Diagnostic("error", "overlay", f"{where}: overlay {written!r} does not exist", origin))
            continue
        overlays.append(Overlay(resolved, written, origin))
    renames = []
    targets: dict[str, Rename] = {}
    for declared, actual in (doc.get("topics") or {}).items():
        rename = Rename(str(declared), str(actual), loc.key_origin(path + ("topics", declared)))
        twin = targets.get(name_key(rename.actual))
        if twin is not None:
            diags.append(
                Diagnostic("error", "topic-rename",
                           f"{where}: topics {twin.declared!r} and {rename.declared!r} are both renamed to {rename.actual!r}",
                           rename.origin, related=(twin.origin,))
            )
        targets[name_key(rename.actual)] = rename
        renames.append(rename)
    return Environment(
        name=name,
        origin=loc.key_origin(path),
        connection_string_env=doc.get("connection_string_env"),
        endpoint=doc.get("endpoint"),
        auth=doc.get("auth"),
        management_endpoint=doc.get("management_endpoint"),
        vars=variables,
        overlays=tuple(overlays),
        renames=tuple(renames),
    )
