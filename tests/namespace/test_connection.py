"""Connection strings, transport rules, SAS tokens, and that secrets never print."""

from __future__ import annotations

import logging

import pytest

from reconciler.errors import SbrulesError
from reconciler.namespace import credentials as sas
from reconciler.namespace.connection import ConnectionString, ConnectionStringError, TransportRefused

pytestmark = pytest.mark.unit

KEY = "s3cr3t+Key/Value=="
CS = f"Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={KEY}"


def test_parse_keys_case_insensitive_and_entity_path():
    conn = ConnectionString.parse(f"endpoint=sb://myns.servicebus.windows.net/;sharedaccesskeyname=Root;"
                                  f"SHAREDACCESSKEY={KEY};EntityPath=orders;TransportType=Amqp;")
    assert (conn.host, conn.port, conn.key_name, conn.key, conn.entity_path) == (
        "myns.servicebus.windows.net", None, "Root", KEY, "orders")
    assert conn.endpoint == "sb://myns.servicebus.windows.net/"
    assert conn.audience("t/Subscriptions/s/$management") == "sb://myns.servicebus.windows.net/t/Subscriptions/s/$management"


def test_key_value_may_contain_equals_signs():
    assert ConnectionString.parse(CS).key == KEY


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("SharedAccessKeyName=Root;SharedAccessKey=x", "no Endpoint"),
        ("Endpoint=sb://;SharedAccessKeyName=a;SharedAccessKey=b", "no host"),
        ("Endpoint=sb://h:notaport/", "invalid port"),
        ("Endpoint=sb://ns/;SharedAccessKeyName=;SharedAccessKey=b", "SharedAccessKeyName has an empty value"),
        ("Endpoint=sb://ns/;garbage", "segment 2 is not Key=Value"),
        ("Endpoint=sb://ns/;Endpoint=sb://other/", "given twice"),
        ("Endpoint=sb://ns/;SharedAccessKeyName=a", "no SharedAccessKey "),
        ("Endpoint=sb://ns/;SharedAccessKey=b", "no SharedAccessKeyName"),
        ("Endpoint=sb://ns/;SharedAccessKey=b;SharedAccessKeyName=a;SharedAccessSignature=SharedAccessSignature sr=x", "not both"),
        ("Endpoint=sb://ns/;SharedAccessSignature=sr=x&sig=y", "must start with"),
        ("Endpoint=sb://ns/;UseDevelopmentEmulator=maybe", "true or false"),
        ("Endpoint=sb://user:pw@ns/", "user information"),
    ],
)
def test_connection_string_errors(text, message):
    with pytest.raises(ConnectionStringError, match=message) as info:
        ConnectionString.parse(text)
    assert isinstance(info.value, SbrulesError)


def test_errors_never_echo_values():
    with pytest.raises(ConnectionStringError) as info:
        ConnectionString.parse("Endpoint=sb://ns/;SharedAccessKeyName=a;MySecretKeyPastedAlone")
    assert "MySecretKeyPastedAlone" not in str(info.value)


def test_repr_and_str_redact_secrets():
    conn = ConnectionString.parse(CS)
    assert KEY not in repr(conn) and KEY not in str(conn)
    assert "SharedAccessKey=***" in str(conn) and "Root" in repr(conn)
    signed = ConnectionString.parse("Endpoint=sb://ns/;SharedAccessSignature=SharedAccessSignature sr=a&sig=SIGSECRET&se=1&skn=k")
    assert "SIGSECRET" not in repr(signed) and "SIGSECRET" not in str(signed)


def test_transport_is_tls_5671_by_default_even_for_loopback():
    assert ConnectionString.parse(CS).transport().url == "amqps://myns.servicebus.windows.net:5671"
    local = ConnectionString.parse("Endpoint=sb://127.0.0.1:7000/;SharedAccessKeyName=a;SharedAccessKey=b")
    assert local.transport().url == "amqps://127.0.0.1:7000"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1.2.3", "[::1]"])
def test_plain_amqp_only_for_emulator_on_loopback(host):
    conn = ConnectionString.parse(f"Endpoint=sb://{host}/;UseDevelopmentEmulator=true")
    transport = conn.transport()
    assert transport.scheme == "amqp" and transport.port == 5672 and not transport.tls


@pytest.mark.parametrize("host", ["myns.servicebus.windows.net", "10.0.0.5", "example.com", "localhost.evil.com"])
def test_emulator_flag_refused_for_remote_hosts(host):
    conn = ConnectionString.parse(f"Endpoint=sb://{host}/;UseDevelopmentEmulator=true")
    with pytest.raises(TransportRefused, match="loopback"):
        conn.transport()


def test_sas_token_matches_an_independently_computed_vector():
    # Signature computed with: printf '%s\n%s' "$ENC" 1700000000 | openssl dgst -sha256 -hmac "$KEY" -binary | base64
    token = sas.sas_token("sb://myns.servicebus.windows.net/topic/Subscriptions/sub/$management",
                          "RootManageSharedAccessKey", "abc+/=Key", 1700000000)
    assert token == (
        "SharedAccessSignature sr=sb%3A%2F%2Fmyns.servicebus.windows.net%2Ftopic%2FSubscriptions%2Fsub%2F%24management"
        "&sig=h4NN4k7St3cLrZfnwrRtIn7qL135954xmIXPDx8dOdY%3D&se=1700000000&skn=RootManageSharedAccessKey"
    )


def test_url_encode_follows_webutility():
    assert sas.url_encode("a b~!*()_-.é/") == "a+b%7E!*()_-.%C3%A9%2F"


def test_token_providers_redact_and_expire():
    provider = sas.token_provider_for(ConnectionString.parse(CS))
    token = provider.get_token("sb://myns.servicebus.windows.net/t/$management")
    assert token.token_type == "servicebus.windows.net:sastoken"
    assert token.value.startswith("SharedAccessSignature sr=")
    for text in (repr(token), str(token), repr(provider)):
        assert KEY not in text and "sig=" not in text
    fixed = sas.token_provider_for(ConnectionString.parse(
        "Endpoint=sb://ns/;SharedAccessSignature=SharedAccessSignature sr=a&sig=b&se=1900000000&skn=k"))
    assert fixed.get_token("anything").expires_at == 1900000000
    with pytest.raises(sas.AuthConfigError, match="'se'"):
        sas.token_provider_for(ConnectionString.parse("Endpoint=sb://ns/;SharedAccessSignature=SharedAccessSignature sr=a"))
    with pytest.raises(sas.AuthConfigError, match="no SharedAccessKeyName"):
        sas.token_provider_for(ConnectionString.parse("Endpoint=sb://ns/"))


def test_one_renewal_policy_ten_minutes_before_expiry_or_two_thirds_into_a_short_life():
    assert sas.renewal_due(issued_at=0, expires_at=3600) == 3000  # an hour's token: ten minutes before
    assert sas.renewal_due(issued_at=0, expires_at=900) == 600  # a quarter hour's: a third of its life left
    assert sas.renewal_due(issued_at=100, expires_at=100 + 60, margin=600) == 140


def test_entra_provider_uses_credential_and_jwt_type():
    class Access:
        token, expires_on = "JWTSECRET", 1900000000

    class Credential:
        scopes = []

        def get_token(self, scope):
            self.scopes.append(scope)
            return Access()

    cred = Credential()
    token = sas.EntraTokenProvider(cred).get_token("sb://ns/t/$management")
    assert (token.token_type, token.expires_at, cred.scopes) == ("jwt", 1900000000, [sas.ENTRA_SCOPE])
    assert "JWTSECRET" not in repr(token)


def test_secrets_not_logged(caplog):
    caplog.set_level(logging.DEBUG)
    conn = ConnectionString.parse(CS)
    logging.getLogger("t").info("connecting to %s (%r)", conn, conn)
    assert KEY not in caplog.text


def test_entra_without_azure_identity_explains_the_extra(monkeypatch):
    import sys

    from reconciler.extras import MissingExtra

    monkeypatch.setitem(sys.modules, "azure.identity", None)
    with pytest.raises(MissingExtra, match=r"sbrules\[entra\]"):
        sas.token_provider_for(ConnectionString.parse("Endpoint=sb://ns/"), auth="entra")
    with pytest.raises(sas.AuthConfigError, match="unknown authentication"):
        sas.token_provider_for(ConnectionString.parse(CS), auth="kerberos")
