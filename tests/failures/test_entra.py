"""``--auth entra`` end to end: the emulator, given a development signing key, accepts Entra ID
tokens on ``$cbs`` and as Bearer tokens on its management API; every networked command runs with
them, and a token it cannot accept is one line naming the cause."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from reconciler.demo import drifted_namespace
from reconciler.emulator import Emulator
from reconciler.model import Message
from reconciler.rulefiles import load_paths

RULES = Path(__file__).resolve().parents[2] / "rules"
KEY = "dev-entra-" + secrets.token_urlsafe(32)


def endpoint_only(emu: Emulator) -> str:
    """The emulator's connection string without any SAS credential: only Entra ID can get in."""
    return f"Endpoint=sb://127.0.0.1:{emu.port};UseDevelopmentEmulator=true"


@pytest.fixture
def entra_namespace():
    live, _ = drifted_namespace(load_paths([RULES]))
    with Emulator(live, entra_signing_key=KEY) as emu:
        yield emu


def test_plan_apply_drift_export_sample_with_entra(entra_namespace, entra_credential, run_cli, tmp_path, monkeypatch):
    credential = entra_credential(KEY)
    monkeypatch.setenv("SERVICEBUS_CONNECTION_STRING", endpoint_only(entra_namespace))
    monkeypatch.setenv("SBRULES_AUTH", "entra")
    rules = str(RULES)

    code, out, err = run_cli("plan", rules, "--detailed-exitcode")
    assert code == 2 and "Plan:" in out, err
    code, out, err = run_cli("drift", rules)
    assert code == 2, err
    code, out, err = run_cli("apply", rules, "--auto-approve")
    assert code == 0 and "Apply complete" in out, err
    code, out, err = run_cli("drift", rules, "--auth", "entra")
    assert code == 0 and "In sync" in out, err

    code, _, err = run_cli("export", "--topic", "orders", "--out", tmp_path / "export")  # discovery over REST
    assert code == 0 and (tmp_path / "export" / "orders.yaml").exists(), err
    code, out, err = run_cli("topics", "--format", "json")
    assert code == 0 and "orders" in {t["name"] for t in json.loads(out)["topics"]}, err
    code, out, err = run_cli("rules", "list", "--topic", "orders", "--subscription", "billing", "--format", "json")
    assert code == 0 and json.loads(out)["subscriptions"]["billing"]["rules"], err

    entra_namespace.publish("orders", [Message.from_json({"user": {"n": i}}) for i in range(3)])
    code, out, err = run_cli(
        "sample", "--topic", "orders", "--subscription", "audit", "--out", tmp_path / "sample", "--format", "json",
    )
    assert code == 0 and json.loads(out)["written"] == 3, err
    assert credential.scopes and set(credential.scopes) == {("https://servicebus.azure.net/.default",)}


def test_emulator_refuses_entra_tokens_by_default(entra_credential, run_cli, check):
    entra_credential(KEY)
    with Emulator(load_paths([RULES])) as emu:  # no signing key: SAS only, as by default
        result = run_cli("plan", str(RULES), "--auth", "entra", "--connection-string", endpoint_only(emu))
    check.one_error(*result, 1, "refused the token.*Entra ID")


@pytest.mark.parametrize(
    "problem, options, cause",
    [
        ("another key", {"key": "another-" + secrets.token_urlsafe(32)}, "refused the token.*[Ss]ignature"),
        ("expired", {"lifetime": -60}, "refused the token.*expired"),
    ],
)
def test_a_token_the_emulator_cannot_accept_is_one_line(entra_namespace, entra_credential, run_cli, check, problem,
                                                        options, cause):
    key = options.pop("key", KEY)
    entra_credential(key, **options)
    result = run_cli("drift", str(RULES), "--auth", "entra", "--connection-string", endpoint_only(entra_namespace))
    check.one_error(*result, 1, cause)


def test_management_api_takes_bearer_tokens_only_with_the_key(entra_namespace, entra_credential, run_cli, check):
    entra_credential(KEY)
    code, out, err = run_cli("subscriptions", "--topic", "orders", "--auth", "entra",
                             "--connection-string", endpoint_only(entra_namespace))
    assert code == 0 and "billing" in out, err
    with Emulator(load_paths([RULES])) as plain:
        result = run_cli("subscriptions", "--topic", "orders", "--auth", "entra",
                         "--connection-string", endpoint_only(plain))
    check.one_error(*result, 1, "Manage rights.*HTTP 401")


def test_signing_key_must_be_long_enough(run_cli):
    code, _, err = run_cli("emulator", "--port", "0", "--entra-signing-key", "short")
    assert code == 64 and "32 bytes" in err


NETWORKED = [
    ["plan"], ["apply"], ["drift"], ["export"], ["sample"], ["topics"], ["subscriptions"], ["rules", "list"],
]


@pytest.mark.unit
@pytest.mark.parametrize("command", NETWORKED, ids=" ".join)
def test_every_networked_command_takes_the_one_auth_option(command):
    import click

    from reconciler.cli import cli

    target = cli
    for name in command:
        target = target.get_command(click.Context(target), name)
    options = {opt for param in target.params for opt in getattr(param, "opts", ())}
    assert {"--auth", "--connection-string", "--timeout"} <= options
    auth = next(p for p in target.params if "--auth" in p.opts)
    assert list(auth.type.choices) == ["sas", "entra"] and auth.envvar == "SBRULES_AUTH"
