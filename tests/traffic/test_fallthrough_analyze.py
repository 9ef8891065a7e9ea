"""The fall-through subscription against the Spark report: after `sbrules apply` and an SDK publish
to the emulator, `sbrules sample` of the tap and `sbrules analyze` count as unrouted exactly the
messages the fall-through subscription holds."""

from __future__ import annotations

import json

import pytest

from tests.emulator import fallthrough_shop as shop

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_analyze_counts_what_the_fallthrough_holds(spark, run_cli, tmp_path, output_schema):
    with shop.empty_emulator() as emulator:
        rules, held = shop.apply_and_publish(emulator, run_cli, tmp_path)
        sample = tmp_path / "sample"
        code, out, err = run_cli(
            "sample", "--topic", "orders", "--subscription", "tap", "--out", sample,
            "--connection-string", emulator.connection_string,
        )
        assert code == 0, out + err
    code, out, err = run_cli("analyze", rules, "--traffic", sample, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    output_schema("analyze").validate(doc)
    (topic,) = doc["topics"]
    assert topic["messages"] == len(shop.MESSAGES)
    assert topic["unrouted"]["count"] == len(held["leftovers"]) == len(shop.UNROUTED)
    examples = set(topic["unrouted"]["examples"])  # message ids
    assert examples and examples <= held["leftovers"]
    assert topic["not_receiving"] == [
        {"subscription": "tap", "reason": "sampling tap"}, {"subscription": "leftovers", "reason": "fall-through"}
    ]
