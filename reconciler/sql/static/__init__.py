"""Static proofs about filters: a filter no message can match, and a rule another rule covers.

This package is the one home of the solver encoding of a message as Service Bus filters see it.
Every property is a type tag (missing, null, bool, string, each .NET numeric type, and the other
run-time types of :mod:`reconciler.sql.values`) with a value per domain; every predicate is
four-valued (TRUE, FALSE, UNKNOWN, evaluation error), with AND/OR short-circuiting left to right
as the Python evaluator does. A rule *matches* when its filter is TRUE without an error.

The proofs go through the z3 SMT solver. The encoding is exact for the common fragment: a
property compared with a number, string, bool or null literal (C# numeric promotion, null and
missing semantics, type-mismatch errors), IN over literals, IS NULL, EXISTS, constant
subexpressions, correlation filters, true and false filters. Everything else (LIKE, arithmetic,
two properties compared, a long beyond 2^53 compared with a double, Guid and time values) becomes
a free atom: the same subexpression has the same value within one message, but no more is assumed.
So the solver only sees *more* possible messages than exist: an "unsatisfiable" or "covered"
proof is sound (never contradicted by a message), and a filter outside the fragment may simply
go unproven.

z3 costs about a millisecond per question, so most questions never reach it: a filter for which
a quick search over the literals it names finds a matching message (checked with the Python
evaluator) is satisfiable, and a rule whose witness message the other rule does not match is not
covered by it.
"""

from reconciler.sql.static.facts import Facts, find_witness
from reconciler.sql.static.proofs import StaticFinding, analyse_rules, covers, is_plain_false, unsatisfiable

__all__ = ["Facts", "StaticFinding", "analyse_rules", "covers", "find_witness", "is_plain_false", "unsatisfiable"]
