"""limits: the names the service accepts and refuses, per kind of entity, and the SQL text length."""

from __future__ import annotations

import pytest

from reconciler.limits import EntityKind, name_problem, sql_text_problem


@pytest.mark.parametrize("kind", list(EntityKind))
def test_plain_names_are_accepted_by_every_kind(kind):
    assert name_problem(kind, "orders.eu-west_1") is None


@pytest.mark.parametrize(
    ("kind", "name", "reason"),
    [
        (EntityKind.RULE, "", "empty"),
        (EntityKind.RULE, "  ", "empty"),
        (EntityKind.RULE, "r" * 51, "51 characters"),
        (EntityKind.RULE, "a/b", "contains /"),
        (EntityKind.RULE, "a\\b", "contains \\"),
        (EntityKind.RULE, "star*", "contains *"),
        (EntityKind.SUBSCRIPTION, "s" * 51, "51 characters"),
        (EntityKind.SUBSCRIPTION, "team/orders", "contains /"),
        (EntityKind.SUBSCRIPTION, "$sub", "reserves"),
        (EntityKind.TOPIC, "t" * 261, "261 characters"),
        (EntityKind.TOPIC, "/orders", "starts or ends with /"),
        (EntityKind.TOPIC, "orders\\", "starts or ends with /"),
        (EntityKind.TOPIC, "who@where", "contains @"),
        (EntityKind.QUEUE, "q?#", "contains # ?"),
        (EntityKind.QUEUE, "$management", "reserves"),
    ],
)
def test_refused_names_say_why(kind, name, reason):
    problem = name_problem(kind, name)
    assert problem is not None and reason in problem


def test_names_at_their_limits_and_paths_are_accepted():
    assert name_problem(EntityKind.RULE, "$Default") is None
    assert name_problem(EntityKind.RULE, "r" * 50) is None
    assert name_problem(EntityKind.SUBSCRIPTION, "s" * 50) is None
    assert name_problem(EntityKind.TOPIC, "t" * 260) is None
    assert name_problem(EntityKind.TOPIC, "sales/orders") is None


def test_sql_text_length():
    assert sql_text_problem("a" * 1024, "filter") is None
    assert "1025 characters" in (sql_text_problem("a" * 1025, "action") or "")


def test_lengths_are_counted_as_dotnet_counts_them():
    """UTF-16 code units: a character outside the BMP (an emoji) counts twice, as String.Length does."""
    from reconciler.limits import dotnet_length

    assert dotnet_length("abc") == 3 and dotnet_length("é") == 1 and dotnet_length("🚚") == 2
    assert name_problem(EntityKind.RULE, "🚚" * 25) is None
    assert "51 characters" in (name_problem(EntityKind.RULE, "a" + "🚚" * 25) or "")
    assert sql_text_problem("a = '" + "🚚" * 509 + "'", "filter") is None  # 6 + 1,018 = 1,024
    assert "1026 characters" in (sql_text_problem("a = '" + "🚚" * 510 + "'", "filter") or "")


@pytest.mark.parametrize("name", ["x.sbrules-tmp", "X.SBRULES-TMP", ".sbrules-tmp"])
def test_the_temporary_rule_suffix_is_reserved_whatever_its_case(name):
    from reconciler.limits import is_temp_rule_name

    assert is_temp_rule_name(name)
    assert not is_temp_rule_name("x.sbrules-tmp2") and not is_temp_rule_name("sbrules-tmp")
