"""Exact wire facts (types, spellings, attach properties), status handling, drops and TLS."""

from __future__ import annotations

import datetime
import subprocess

import proton
import pytest
from proton import Data, symbol

from reconciler import model as m
from reconciler.amqp import codec, messages
from reconciler.amqp.client import ManagementClient
from reconciler.amqp.messaging import ScheduledMessage
from reconciler.namespace import errors
from reconciler.namespace.network import Network

from .wire_server import WireServer

OK = {"statusCode": proton.int32(200), "statusDescription": "OK"}


def rules_page(address, msg):
    rule = m.Rule("r", m.SqlFilter("a = 1"))
    return OK, codec.encode_enumerate_rules_body([(rule, None)])


def test_cbs_and_request_framing_follow_the_spec():
    with WireServer(respond=rules_page) as server:
        with ManagementClient(server.connection_string(), timeout=7, retries=0) as client:
            assert client.list_rules("orders", "s") == [m.Rule("r", m.SqlFilter("a = 1"))]
    (put,) = server.cbs_requests
    audience = f"sb://127.0.0.1:{server.port}/orders/Subscriptions/s/$management"
    assert put.properties["operation"] == "put-token"
    assert put.properties["type"] == "servicebus.windows.net:sastoken"
    assert put.properties["name"] == audience
    assert type(put.properties["expiration"]) is proton.timestamp
    assert isinstance(put.body, str) and put.body.startswith("SharedAccessSignature sr=")
    ((address, request),) = server.requests
    assert address == "orders/Subscriptions/s/$management"
    assert request.properties["operation"] == "com.microsoft:enumerate-rules"
    timeout = request.properties["com.microsoft:server-timeout"]
    assert type(timeout) is proton.uint and timeout == 7000
    assert request.body == {"top": 100, "skip": 0}
    assert all(type(v) is proton.int32 for v in request.body.values())
    assert request.id and request.reply_to
    by_role = {(a.role, a.address): a for a in server.attaches}
    sender = by_role[("sender", "orders/Subscriptions/s/$management")]
    receiver = by_role[("receiver", "orders/Subscriptions/s/$management")]
    assert receiver.reply_to == request.reply_to
    assert sender.snd_settle_mode == proton.Link.SND_SETTLED
    assert sender.properties["com.microsoft:entity-type"] == "entity-mgmt"
    assert type(sender.properties["com.microsoft:timeout"]) is proton.uint
    assert by_role[("sender", "$cbs")] and by_role[("receiver", "$cbs")].reply_to == put.reply_to
    assert len({a.name for a in server.attaches}) == len(server.attaches)  # explicit unique link names


def test_request_bodies_of_other_operations_have_spec_types():
    import datetime as dt
    import uuid

    from reconciler.amqp.messaging import Disposition, SettleMode

    responses = {
        "com.microsoft:renew-lock": {"expirations": proton.Array(proton.UNDESCRIBED, Data.TIMESTAMP, proton.timestamp(1000))},
        "com.microsoft:get-message-sessions": {"skip": proton.int32(1), "sessions-ids": proton.Array(proton.UNDESCRIBED, Data.STRING, "s1")},
        "com.microsoft:receive-by-sequence-number": {"messages": []},
        "com.microsoft:schedule-message": {"sequence-numbers": proton.Array(proton.UNDESCRIBED, Data.LONG, 9)},
    }

    def respond(address, msg):
        return OK, responses.get(msg.properties["operation"])

    token = uuid.uuid4()
    with WireServer(respond=respond) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=0) as c:
            assert c.renew_lock("q", None, [token]) == [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)]
            assert c.get_message_sessions("q", None, dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)) == ["s1"]
            assert c.receive_by_sequence_number("q", None, [5], SettleMode.RECEIVE_AND_DELETE) == []
            c.update_disposition("q", None, [token], Disposition.DEFERRED)
            when = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
            assert c.schedule_messages("t", [ScheduledMessage(m.Message(body=b"x"), when)]) == [9]
            c.peek_messages("t", "s", 7, 3, session_id="sess")
    bodies = {msg.properties["operation"].removeprefix("com.microsoft:"): msg.body for _, msg in server.requests}
    lock_tokens = bodies["renew-lock"]["lock-tokens"]
    assert isinstance(lock_tokens, proton.Array) and lock_tokens.type == Data.UUID and list(lock_tokens.elements) == [token]
    sessions = bodies["get-message-sessions"]
    assert type(sessions["last-updated-time"]) is proton.timestamp and type(sessions["top"]) is proton.int32
    receive = bodies["receive-by-sequence-number"]
    assert receive["sequence-numbers"].type == Data.LONG and type(receive["receiver-settle-mode"]) is proton.uint
    assert receive["receiver-settle-mode"] == 0
    assert bodies["update-disposition"]["disposition-status"] == "defered"
    scheduled = bodies["schedule-message"]["messages"][0]
    assert isinstance(scheduled["message"], (bytes, memoryview)) and scheduled["message-id"]
    decoded = messages.decode_model_message(scheduled["message"])
    assert "x-opt-scheduled-enqueue-time" in decoded.annotations
    peek = bodies["peek-message"]
    assert type(peek["from-sequence-number"]) is int and type(peek["message-count"]) is proton.int32
    assert peek["session-id"] == "sess"


@pytest.mark.parametrize(
    "props, cls",
    [
        ({"statusCode": proton.int32(404), "errorCondition": symbol("amqp:not-found"), "statusDescription": "gone"}, errors.NotFoundError),
        ({"status-code": proton.int32(409), "error-condition": "com.microsoft:entity-already-exists"}, errors.AlreadyExistsError),
        ({"statusCode": proton.int32(400), "statusDescription": "bad"}, errors.BadRequestError),
        ({"statusCode": proton.int32(401)}, errors.UnauthorizedError),
        ({"statusCode": proton.int32(403), "errorCondition": symbol("amqp:resource-limit-exceeded")}, errors.QuotaExceededError),
        ({}, errors.InternalError),
    ],
)
def test_status_spellings_map_to_errors(props, cls):
    with WireServer(respond=lambda a, msg: (props, None)) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=0) as client:
            with pytest.raises(cls):
                client.remove_rule("t", "s", "r")


def test_204_and_message_not_found_read_as_empty():
    answers = iter([
        ({"statusCode": proton.int32(204)}, None),
        ({"statusCode": proton.int32(404), "errorCondition": symbol("com.microsoft:message-not-found")}, None),
        ({"statusCode": proton.int32(204), "errorCondition": symbol("com.microsoft:session-not-found")}, None),
    ])
    with WireServer(respond=lambda a, msg: next(answers)) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=0) as client:
            assert client.list_rules("t", "s") == []
            assert client.peek_messages("t", "s", 1, 10) == []
            assert client.get_message_sessions("q", None, datetime.datetime(2024, 1, 1)) == []


def test_connection_dropped_mid_request_is_retried_on_a_new_connection():
    with WireServer(respond=rules_page, drop_on={1, 3}) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=3, backoff=0.001) as client:
            assert len(client.list_rules("t", "s")) == 1
            assert len(client.list_rules("t", "s")) == 1
    assert server.connections == 3
    assert len(server.cbs_requests) == 3  # re-authenticated after each reconnect


def test_already_exists_after_a_retry_says_an_earlier_attempt_may_have_landed():
    """The client reports what came back; apply decides that its own earlier attempt is success."""

    def respond(address, msg):
        return {"statusCode": proton.int32(409), "errorCondition": symbol("com.microsoft:entity-already-exists")}, None

    with WireServer(respond=respond, drop_on={1}) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=3, backoff=0.001) as client:
            with pytest.raises(errors.AlreadyExistsError) as retried:
                client.add_rule("t", "s", m.Rule("r", m.SqlFilter("a = 1")))  # dropped once, then 409
            with pytest.raises(errors.AlreadyExistsError) as first:
                client.add_rule("t", "s", m.Rule("r", m.SqlFilter("a = 1")))
    assert retried.value.after_retry and not first.value.after_retry


def test_rate_limit_spaces_requests():
    import time

    with WireServer(respond=rules_page) as server:
        with ManagementClient(server.connection_string(), timeout=5, max_rate=20) as client:
            client.list_rules("t", "s")
            started = time.monotonic()
            for _ in range(5):
                client.list_rules("t", "s")
            assert time.monotonic() - started >= 0.2


# -- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return str(cert), str(key)


def tls_server(certificate):
    cert, key = certificate
    domain = proton.SSLDomain(proton.SSLDomain.MODE_SERVER)
    domain.set_credentials(cert, key, None)
    return WireServer(respond=rules_page, ssl_domain=domain)


def test_tls_with_trusted_certificate_and_matching_host(certificate):
    with tls_server(certificate) as server:
        with ManagementClient(server.connection_string("localhost", emulator=False), timeout=5, retries=0,
                              network=Network(ca_file=certificate[0])) as client:
            assert client.list_rules("t", "s")


def test_tls_refuses_untrusted_certificate(certificate):
    with tls_server(certificate) as server:
        with ManagementClient(server.connection_string("localhost", emulator=False), timeout=5, retries=3) as client:
            with pytest.raises(errors.TransportSecurityError, match="certificate verify failed"):
                client.list_rules("t", "s")
    assert not server.requests and not server.cbs_requests


def test_tls_refuses_host_name_mismatch(certificate):
    with tls_server(certificate) as server:
        with ManagementClient(server.connection_string("127.0.0.1", emulator=False), timeout=5, retries=0,
                              network=Network(ca_file=certificate[0])) as client:
            with pytest.raises(errors.TransportSecurityError):
                client.list_rules("t", "s")
    assert not server.cbs_requests


def test_silent_peer_is_dropped_and_reported():
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    try:
        cs = f"Endpoint=sb://127.0.0.1:{port}/;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
        with ManagementClient(cs, timeout=2, retries=0) as client:
            with pytest.raises(errors.OpenTimeoutError, match="did not open AMQP within 1"):
                client.list_rules("t", "s")
    finally:
        listener.close()


def test_detached_working_link_is_retried_but_refused_attach_is_not():
    class Detaching(WireServer):
        detach_next = True

        def on_message(self, event):
            address = event.receiver.remote_target.address
            if address != "$cbs" and self.detach_next:
                self.detach_next = False
                self.requests.append((address, event.message))
                event.receiver.condition = proton.Condition("amqp:link:detach-forced", "rebalancing")
                event.receiver.close()
                return
            super().on_message(event)

    with Detaching(respond=rules_page) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=2, backoff=0.001) as client:
            assert client.list_rules("t", "s")
    assert len(server.requests) == 2 and len(server.cbs_requests) == 2

    class Refusing(WireServer):
        def on_link_opening(self, event):
            super().on_link_opening(event)
            event.link._refuse = event.link.is_receiver and event.link.remote_target.address != "$cbs"

        def on_link_opened(self, event):
            if getattr(event.link, "_refuse", False):  # as the service does: attach, then detach
                event.link.condition = proton.Condition("amqp:unauthorized-access", "Listen claim required")
                event.link.close()

    with Refusing(respond=rules_page) as server:
        with ManagementClient(server.connection_string(), timeout=5, retries=3, backoff=0.001) as client:
            with pytest.raises(errors.UnauthorizedError, match="Listen claim required"):
                client.list_rules("t", "s")
    assert len(server.cbs_requests) == 1
