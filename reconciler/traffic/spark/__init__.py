"""Service Bus filters as native Spark Columns over a traffic sample (docs/sql-language.md §10).

The translation walks the one SQL AST of :mod:`reconciler.sql`, like the canonical printer and
the Python evaluator do, and compiles it to columns of the sample layout
(:mod:`reconciler.traffic.sample.rows`); it never lets Spark coerce a value. Its parts, bottom up:

- :mod:`~reconciler.traffic.spark.algebra`: compiled values (type tags plus typed columns) and
  predicates, the ``CASE`` builders that prune unreachable branches, constants;
- :mod:`~reconciler.traffic.spark.cells`: user and system property values, the per-message
  property lookups and type tests a report shares among its filters;
- :mod:`~reconciler.traffic.spark.dotnet_text`: the .NET text of computed values;
- :mod:`~reconciler.traffic.spark.operators`: arithmetic, comparison, IN and LIKE;
- :mod:`~reconciler.traffic.spark.translate`: the AST walker;
- :mod:`~reconciler.traffic.spark.rules`: model filters and rules, with the Python UDF
  fallback of :mod:`~reconciler.traffic.spark.fallback` for what has no native translation.
"""

from reconciler.traffic.spark.algebra import Untranslatable
from reconciler.traffic.spark.cells import Cells, PropertyCells
from reconciler.traffic.spark.rules import RuleColumns, filter_columns, property_names, rule_columns
from reconciler.traffic.spark.translate import to_spark

__all__ = [
    "Cells",
    "PropertyCells",
    "RuleColumns",
    "Untranslatable",
    "filter_columns",
    "property_names",
    "rule_columns",
    "to_spark",
]
