"""The settings the translation and its speed rely on are pinned on the session sbrules creates."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_local_session_pins_results_and_speed_settings(spark):
    from reconciler.traffic.session import HUGE_METHOD_LIMIT, NO_CALL_SITES

    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.codegen.hugeMethodLimit") == str(HUGE_METHOD_LIMIT)
    assert spark.conf.get(NO_CALL_SITES) == "false"
