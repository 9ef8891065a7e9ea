"""Why a rule matched nothing: its near misses in the sample.

For a rule no sampled message of its topic matched, each equality it asks of an application
property (a correlation filter's properties, a SQL filter's ``name = literal`` conjuncts) is looked
for in the topic's messages under looser terms, and what is found is named with counts and
example ids (one Spark job for every such rule of a report):

- ``type``: the property holds the value as another type: ``int 1`` where a correlation filter
  wants ``long 1``, the string ``"3"`` where it wants the number 3 (correlation filters compare
  types strictly; SQL compares any two numbers by value, so for SQL only a string against a
  number is a miss);
- ``case``: a string that differs only in case (values compare case-sensitively);
- ``system-property``: the name is a system property's (``Label``) given as an application
  property, and messages carry the value in that system property (``sys.Label`` in SQL, the
  ``label`` field of a correlation filter).

Property *names* are compared case-insensitively by the service (docs/sql-language.md), so a
property under a differently-cased name is the same property, not a near miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from reconciler.model import SYSTEM_PROPERTY, CorrelationFilter, Rule, SqlFilter, TypedValue, ValueType
from reconciler.sql import SqlError, ast, parse_filter, values

#: Groups (a type and value of one property) listed per equality, the largest first.
LISTED = 5
_NUMBERS = {"byte", "sbyte", "short", "ushort", "int", "uint", "long", "ulong", "float", "double", "decimal"}
_SYSTEM = {name.lower(): prop for name, prop in SYSTEM_PROPERTY.items() if prop.type is ValueType.STRING}


@dataclass(frozen=True)
class Equality:
    """One ``property = value`` a rule asks of an application property; ``strict``: compared with
    its type (a correlation filter), else by SQL's rules."""

    name: str
    value: TypedValue
    strict: bool

    @property
    def text(self) -> str:
        """The value's .NET text (what the sample's ``s`` field holds)."""
        return values.to_string(values.from_typed(self.value))


@dataclass(frozen=True)
class NearMiss:
    """Sampled messages that carry what an equality asks, but not as it asks it."""

    cause: str
    property: str
    type: str
    value: str
    count: int
    wanted: Equality
    hashes: tuple[int, ...] = ()

    def describe(self) -> str:
        """``12 carry attempt as int 1, not long 1``."""
        wanted = f"{self.wanted.value.type.value} {self.wanted.text}"
        if self.cause == "system-property":
            return (f"{self.count:,} carry {self.wanted.text!r} in {self.property}, not in an application property "
                    f"{self.wanted.name!r}")
        return f"{self.count:,} carry {self.property} as {self.type} {self.value}, not {wanted}"

    def to_json(self, examples: tuple[str, ...]) -> dict[str, Any]:
        return {
            "cause": self.cause, "property": self.property, "type": self.type, "value": self.value,
            "count": self.count, "wanted": {"type": self.wanted.value.type.value, "value": self.wanted.text},
            "examples": list(examples),
        }


def equalities(rule: Rule) -> list[Equality]:
    """The application-property equalities of ``rule``'s filter (none for other filters)."""
    flt = rule.filter
    if isinstance(flt, CorrelationFilter):
        return [Equality(name, value, True) for name, value in flt.properties]
    tree = sql_tree(rule)
    found = sql_equalities(tree) if tree is not None else None
    out = []
    for prop, literal in found or ():
        if prop.scope != "sys":
            out.append(Equality(prop.name, TypedValue(literal.type, literal.value), False))
    return out


def sql_tree(rule: Rule) -> ast.Predicate | None:
    """A SQL rule's parsed filter (None for other filters, or SQL that does not parse)."""
    if not isinstance(rule.filter, SqlFilter):
        return None
    try:
        return parse_filter(rule.filter.expression)
    except SqlError:
        return None


def sql_equalities(tree: ast.Predicate) -> list[tuple[ast.Property, ast.Literal]] | None:
    """``prop = literal`` conjuncts, or None when the filter is anything else."""
    out = []
    for node in ast.conjuncts(tree):
        if not (isinstance(node, ast.Comparison) and node.op == "="):
            return None
        left, right = node.left, node.right
        if isinstance(left, ast.Literal) and isinstance(right, ast.Property):
            left, right = right, left
        if not (isinstance(left, ast.Property) and isinstance(right, ast.Literal)) or right.type is ValueType.NULL:
            return None
        out.append((left, right))
    return out


def classify(wanted: Equality, found_type: str, found_text: str) -> str | None:
    """The near miss a sampled (type, text) of the property is, None when it is none (or a match)."""
    if found_type == "sys":
        return "system-property"
    mine = wanted.value.type.value
    strings = {"string", "symbol"}
    same_kind = (found_type in strings) == (mine in strings)
    if found_text == wanted.text:
        if found_type == mine or (found_type in strings and mine in strings):
            return None
        if not wanted.strict and found_type in _NUMBERS and mine in _NUMBERS:
            return None  # SQL compares numbers by value
        return "type"
    if found_text.lower() == wanted.text.lower() and same_kind and found_type in strings:
        return "case"
    return None


Key = tuple[str, str, str]


def find(
    frame: Any, topic_of: Any, message_id: Any, asked: Mapping[Key, Sequence[Equality]]
) -> dict[Key, list[NearMiss]]:
    """The near misses of each rule of ``asked`` ((topic key, subscription, rule) → its equalities)
    in the sample ``frame``, its topic read by ``topic_of``: one grouping query for all of them."""
    wanted = sorted({(key[0], eq.name.lower(), eq.text) for key, eqs in asked.items() for eq in eqs})
    if not wanted:
        return {}
    from pyspark.sql import functions as F

    cells = []
    for index, (topic, name, text) in enumerate(wanted):
        here = topic_of == F.lit(topic)
        cell = F.col("props")[name]
        found = here & cell.isNotNull() & (F.lower(cell["s"]) == F.lit(text.lower()))
        cells.append(F.when(found, F.struct(F.lit(index).alias("i"), cell["t"].alias("t"), cell["s"].alias("s"))))
        system = _SYSTEM.get(name)
        if system is not None:
            column = F.col(system.column)
            cells.append(F.when(here & (column == F.lit(text)), F.struct(
                F.lit(index).alias("i"), F.lit("sys").alias("t"), F.lit(f"sys.{system.name}").alias("s"))))
    hits = F.filter(F.array(*cells), lambda cell: cell.isNotNull())
    rows = (
        frame.select(F.xxhash64(message_id).alias("h"), F.explode(hits).alias("m"))
        .groupBy(F.col("m.i").alias("i"), F.col("m.t").alias("t"), F.col("m.s").alias("s"))
        .agg(F.count(F.lit(1)).alias("count"), F.min_by("h", "h", 3).alias("hashes"))
        .collect()
    )
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for row in rows:
        groups.setdefault(wanted[row["i"]], []).append(row)
    out: dict[Key, list[NearMiss]] = {}
    for key, eqs in asked.items():
        for eq in eqs:
            for row in groups.get((key[0], eq.name.lower(), eq.text), ()):
                cause = classify(eq, row["t"], row["s"])
                if cause is None:
                    continue
                shown = row["s"] if cause == "system-property" else eq.name
                out.setdefault(key, []).append(NearMiss(
                    cause, shown, row["t"] if cause != "system-property" else "string",
                    eq.text if cause == "system-property" else row["s"], int(row["count"]), eq,
                    tuple(sorted({int(h) for h in row["hashes"] or ()}))[:3],
                ))
    return {key: sorted(found, key=lambda m: (-m.count, m.cause, m.property))[:LISTED] for key, found in out.items()}

