"""One environment's rules: the base rule files with its variables, then its overlays, then its
topic renames — what every command with ``--env NAME`` works on.

Without a project file the rule files load as they are. With one, a command names an environment
(``validate`` without one checks every environment); the project file and every environment's
overlay directories are never read as base rule files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from reconciler.diagnostics import Diagnostic
from reconciler.errors import UsageError
from reconciler.model import DesiredState
from reconciler.names import name_key
from reconciler.rulefiles.loader import LoadResult, RuleFileErrors, load, read_valid, rule_files
from reconciler.rulefiles.overlays import OVERLAY_SCHEMA, apply_overlay, topic_change
from reconciler.rulefiles.project import Environment, Project, Rename, find_project, read_project
from reconciler.rulefiles.variables import Substitution

DEFAULT_RULES = Path("rules")


@dataclass(frozen=True)
class RuleSource:
    """Where the rules come from: the base paths and, when there is one, the project file."""

    paths: tuple[Path, ...]
    project: Project | None = None


def locate(paths: Sequence[Path]) -> RuleSource:
    """The base paths (default ``./rules``, or the directory of a project file found from here)
    and the project file found from the first of them."""
    if paths:
        file = find_project(Path(paths[0]))
        return RuleSource(tuple(Path(p) for p in paths), read_project(file) if file else None)
    if DEFAULT_RULES.is_dir():
        file = find_project(DEFAULT_RULES)
        return RuleSource((DEFAULT_RULES,), read_project(file) if file else None)
    file = find_project(Path.cwd())
    if file is None:
        raise UsageError("no PATH given and no ./rules directory here")
    return RuleSource((file.parent,), read_project(file))


def load_rules(source: RuleSource, env: str | None) -> LoadResult:
    """The rules of ``env`` (or the plain rule files without a project file), with every finding."""
    project = source.project
    if project is None:
        if env is not None:
            where = ", ".join(map(str, source.paths))
            raise UsageError(f"--env {env}: no sbrules.yaml in {where} or its parents, so there are no environments")
        return load(source.paths)
    if env is None:
        names = ", ".join(project.environments)
        raise UsageError(f"{project.file.name} defines environments ({names}): name one with --env NAME")
    return render(project, project.environment(env), source.paths)


def load_state(source: RuleSource, env: str | None) -> DesiredState:
    """Like :func:`load_rules`, raising RuleFileErrors when there is any error."""
    result = load_rules(source, env)
    if not result.ok:
        raise RuleFileErrors([d for d in result.diagnostics if d.severity == "error"])
    return result.state


def render(project: Project, env: Environment, paths: Sequence[Path]) -> LoadResult:
    """The base files with ``env``'s variables, its overlays merged in order, its topics renamed."""
    substitute = Substitution(env.vars)
    result = load(paths, exclude=project.not_base_files(), prepare=substitute, owns=project.owns)
    diags = result.diagnostics
    state = result.state
    files = result.files
    for overlay in env.overlays:
        changes = []
        overlay_files = rule_files([overlay.path])
        files += len(overlay_files)
        for file in overlay_files:
            read = read_valid(file, diags, OVERLAY_SCHEMA, prepare=substitute)
            if read is not None:
                changes.append(topic_change(read, diags))
        state = apply_overlay(state, changes, diags)
    state = _rename(state, env, diags)
    # A file that could not be read may use any variable: say nothing of unused ones then.
    unreadable = any(d.code in ("io", "encoding", "yaml") for d in diags)
    for name, var in env.vars.items():
        if name not in substitute.used and not unreadable:
            diags.append(
                Diagnostic("warning", "unused-variable",
                           f"environment {env.name!r}: variable {name!r} is not used by any rule file", var.origin)
            )
    return LoadResult(state=replace(state, owners=project.owners), diagnostics=diags, files=files)


def _rename(state: DesiredState, env: Environment, diags: list[Diagnostic]) -> DesiredState:
    renamed: dict[str, Rename] = {name_key(r.declared): r for r in env.renames}
    for rename in env.renames:
        if state.topic(rename.declared) is None:
            diags.append(
                Diagnostic("error", "topic-rename",
                           f"environment {env.name!r}: renames topic {rename.declared!r}, which no rule file declares",
                           rename.origin)
            )
    topics = []
    declared_as: dict[str, str] = {}
    for topic in state.topics:
        to = renamed.get(name_key(topic.name))
        actual = replace(topic, name=to.actual, declared=topic.name) if to else topic
        first = declared_as.get(name_key(actual.name))
        if first is not None:
            diags.append(
                Diagnostic("error", "topic-rename",
                           f"environment {env.name!r}: topics {first!r} and {topic.name!r} would both be "
                           f"{actual.name!r} in this namespace", to.origin if to else topic.origin)
            )
        declared_as[name_key(actual.name)] = topic.name
        topics.append(actual)
    return DesiredState(topics=tuple(topics))


def load_every_environment(source: RuleSource) -> dict[str | None, LoadResult]:
    """``validate`` without --env: every environment's rules (or the plain files without a project)."""
    if source.project is None:
        return {None: load(source.paths)}
    return {name: render(source.project, env, source.paths) for name, env in source.project.environments.items()}
