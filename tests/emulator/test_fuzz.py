"""Throw random management requests and raw garbage at the server, then check it still answers.

Every request must get a response (never a dead loop, never a guarded exception), and after the
storm a well-formed request still works.
"""

from __future__ import annotations

import random
import socket
import uuid

import proton
import pytest
from proton import Array, Data, Described, symbol, ulong

from .raw import RawManagement

OPERATIONS = [
    "enumerate-rules", "add-rule", "remove-rule", "peek-message", "renew-lock", "schedule-message",
    "cancel-scheduled-message", "renew-session-lock", "set-session-state", "get-session-state",
    "get-message-sessions", "receive-by-sequence-number", "update-disposition", "batch-delete-messages",
]
KEYS = [
    "top", "skip", "rule-name", "rule-description", "sql-filter", "correlation-filter", "sql-rule-action",
    "expression", "from-sequence-number", "message-count", "lock-tokens", "messages", "message",
    "sequence-numbers", "session-id", "session-state", "receiver-settle-mode", "disposition-status",
    "properties-to-modify", "last-updated-time", "properties", "label",
]
NODES = ["orders/Subscriptions/all", "orders", "work", "orders/Subscriptions/eu/$DeadLetterQueue"]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(16 if depth < 3 else 11)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([-(2**63), -1, 0, 1, 2**31, 2**63 - 1])
    if kind == 2:
        return proton.int32(rng.randrange(-(2**31), 2**31))
    if kind == 3:
        return "".join(rng.choice("ab =<>'()%_\\\u00e9\u4e2d") for _ in range(rng.choice([0, 3, 40, 2000])))
    if kind == 4:
        return rng.choice([True, False])
    if kind == 5:
        return rng.random() * rng.choice([1, 1e300, -1e-300])
    if kind == 6:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 16, 300])))
    if kind == 7:
        return uuid.UUID(int=rng.getrandbits(128))
    if kind == 8:
        return symbol(rng.choice(KEYS))
    if kind == 9:
        return proton.timestamp(rng.randrange(0, 2**40))
    if kind == 10:
        return "x" * 200_000
    if kind == 11:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 12:
        return Described(ulong(rng.choice([0x1370000006, 0x13700000004, 7])), [_value(rng, depth + 1)])
    if kind == 13:
        return Array(proton.UNDESCRIBED, Data.LONG, *[rng.randrange(-5, 50) for _ in range(rng.randrange(4))])
    if kind == 14:
        return Array(proton.UNDESCRIBED, Data.UUID, *[uuid.UUID(int=rng.getrandbits(128)) for _ in range(2)])
    return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _request(rng: random.Random):
    operation = rng.choice(
        ["com.microsoft:" + rng.choice(OPERATIONS)] * 8 + [None, 42, "put-token", "com.microsoft:" + "z" * 5000]
    )
    body = _value(rng) if rng.random() < 0.3 else {rng.choice(KEYS): _value(rng) for _ in range(rng.randrange(6))}
    return operation, body


@pytest.mark.slow
def test_random_management_requests_always_get_answers(emulator):
    rng = random.Random(20261125)
    for node in NODES:
        with RawManagement(emulator, node) as mgmt:
            for _ in range(60):
                operation, body = _request(rng)
                status, props, _ = mgmt.request(operation, body, {"com.microsoft:server-timeout": _value(rng)})
                assert 200 <= status < 600
                if status >= 400:
                    assert props["statusDescription"]
    assert emulator.handler.errors == 0
    with RawManagement(emulator, "orders/Subscriptions/eu") as mgmt:
        assert mgmt.request("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})[0] in (200, 204)


def test_garbage_on_the_socket_closes_only_that_connection(emulator):
    rng = random.Random(7)
    payloads = [
        b"",
        b"GET / HTTP/1.1\r\n\r\n",
        b"AMQP\x00\x01\x00\x00" + bytes(rng.randrange(256) for _ in range(500)),
        b"AMQP\x03\x01\x00\x00" + bytes(rng.randrange(256) for _ in range(500)),
        bytes(rng.randrange(256) for _ in range(4096)),
    ]
    for payload in payloads:
        with socket.create_connection(("127.0.0.1", emulator.port), timeout=5) as sock:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            try:
                while sock.recv(4096):
                    pass
            except OSError:
                pass
    assert emulator.running
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        assert mgmt.request("com.microsoft:enumerate-rules", {"top": 10, "skip": 0})[0] == 200


def test_undecodable_transfer_is_rejected_not_fatal(emulator):
    with RawManagement(emulator, "orders") as mgmt:
        sender = mgmt.conn.create_sender("orders", name="raw-publisher")
        delivery = sender.link.delivery(b"t1")
        sender.link.send(b"\x00Sw\xa1\xff not really a message")
        sender.link.advance()
        mgmt.conn.wait(lambda: bool(delivery.remote_state), timeout=5, msg="waiting for the outcome")
        assert delivery.remote_state == proton.Delivery.REJECTED
    assert emulator.handler.errors == 0
    assert emulator.running


def test_oversize_request_is_rejected_and_descriptions_stay_short(emulator):
    with RawManagement(emulator, "orders/Subscriptions/all") as mgmt:
        status, props, _ = mgmt.request("com.microsoft:add-rule", {"rule-name": "x" * 500_000, "rule-description": 1})
        assert status == 400 and len(props["statusDescription"]) <= 1024
        assert mgmt.put_token(f"sb://127.0.0.1:{emulator.port}/orders") == 202
        sender = mgmt.conn.create_sender("orders", name="big-publisher")
        delivery = sender.link.delivery(b"big")
        sender.link.send(bytes(proton.Message(body=b"x" * 2_000_000).encode()))
        sender.link.advance()
        mgmt.conn.wait(lambda: bool(delivery.remote_state), timeout=10, msg="waiting for the outcome")
        assert delivery.remote_state == proton.Delivery.REJECTED
        assert mgmt.request("com.microsoft:enumerate-rules", {"top": 1, "skip": 0})[0] == 200
