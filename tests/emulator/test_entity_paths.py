"""Topic names with ``/`` segments, served as the service serves them: over AMQP (management node
addresses), over the REST API (Microsoft's administration client) and through ``sbrules export --all``."""

from __future__ import annotations

import pytest
import yaml
from azure.servicebus.management import ServiceBusAdministrationClient
from click.testing import CliRunner

from reconciler import model
from reconciler.amqp.client import ManagementClient
from reconciler.cli import cli
from reconciler.emulator import Emulator
from reconciler.rulefiles.emulator_config import read_config

NESTED = "team/eu/orders"
DESIRED = model.DesiredState(
    topics=(
        model.Topic(NESTED, (model.Subscription("audit", (model.Rule("eu", model.SqlFilter("region = 'eu'")),)),)),
        model.Topic("plain", (model.Subscription("all"),)),
    )
)


@pytest.fixture
def emu():
    with Emulator(DESIRED) as running:
        yield running


@pytest.mark.slow
def test_rules_of_a_nested_topic_are_written_and_read_over_amqp(emu):
    with ManagementClient(emu.connection_string, timeout=10) as client:
        client.add_rule(NESTED, "audit", model.Rule("vip", model.SqlFilter("tier = 'vip'")))
        assert [r.name for r in client.list_rules(NESTED, "audit")] == ["eu", "vip"]
        client.remove_rule(NESTED, "audit", "eu")
        assert [r.name for r in client.list_rules(NESTED, "audit")] == ["vip"]


@pytest.mark.slow
def test_the_administration_client_reads_a_nested_topic(emu):
    with ServiceBusAdministrationClient.from_connection_string(
        emu.connection_string, connection_verify=emu.ca_file
    ) as admin:
        assert sorted(t.name for t in admin.list_topics()) == ["plain", NESTED]
        assert admin.get_topic(NESTED).name == NESTED
        assert [s.name for s in admin.list_subscriptions(NESTED)] == ["audit"]
        assert [r.name for r in admin.list_rules(NESTED, "audit")] == ["eu"]
        assert admin.get_rule(NESTED, "audit", "eu").filter.sql_expression == "region = 'eu'"


@pytest.mark.slow
def test_export_all_exports_a_nested_topic(emu, tmp_path):
    result = CliRunner().invoke(cli, ["export", "--all", "--connection-string", emu.connection_string])
    assert result.exit_code == 0, result.output
    docs = {d["topic"]: d for d in yaml.safe_load_all(result.stdout)}
    assert set(docs) == {"plain", NESTED}
    assert docs[NESTED]["subscriptions"]["audit"]["rules"] == [{"name": "eu", "sql": "region = 'eu'"}]


@pytest.mark.slow
def test_a_nested_topic_goes_through_config_json_into_the_emulator(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "orders.yaml").write_text(
        f"topic: {NESTED}\nsubscriptions:\n  audit:\n    rules:\n      - name: eu\n        sql: region = 'eu'\n"
    )
    config = tmp_path / "Config.json"
    result = CliRunner().invoke(cli, ["render", str(tmp_path / "rules"), "--format", "emulator-config",
                                      "--out", str(config)])
    assert result.exit_code == 0, result.output
    state, findings = read_config(config)
    assert not findings
    with Emulator(state) as running, ManagementClient(running.connection_string, timeout=10) as client:
        assert [r.name for r in client.list_rules(NESTED, "audit")] == ["eu"]
