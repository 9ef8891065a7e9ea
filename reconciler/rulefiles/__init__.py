"""Rule files (YAML, ``schemas/rules.schema.json``) → the model's DesiredState, with located errors.

``load`` collects every problem as a :class:`~reconciler.diagnostics.Diagnostic` at file:line:column;
``load_paths`` returns the state or raises :class:`RuleFileErrors`.
"""

from reconciler.rulefiles.loader import LoadResult, RuleFileErrors, load, load_paths

__all__ = ["LoadResult", "RuleFileErrors", "load", "load_paths"]
