"""Raw AMQP 1.0 client bytes for fuzzing the emulator, frames built by hand.

- ``session``: a random session (the SASL ANONYMOUS exchange, the AMQP header, open and begin, then
  performatives whose fields are random AMQP values: strings that are not UTF-8, wrong types, huge
  sizes, nested lists), which ``mutate`` then flips, cuts, repeats or splices bytes of.
- ``seeds``: valid sessions (put-token, management requests, publishing, receiving and settling)
  that reach each part of the server; the coverage-guided fuzzer starts from them.
- ``errors``: the error conditions in what the emulator wrote back.
"""

from __future__ import annotations

import random
import socket
import struct
import uuid
from typing import Any

from proton import UNDESCRIBED, Array, Data, Described, symbol, timestamp, ubyte, uint, ulong

from reconciler import model
from reconciler.amqp import codec
from reconciler.amqp.wire.decode import read_value
from reconciler.amqp.wire.encode import encode_value
from reconciler.amqp.wire.sections import encode_management_message, encode_value_section
from reconciler.amqp.wire.types import DecodeError
from reconciler.emulator.emulator import DEV_KEY, DEV_KEY_NAME
from reconciler.namespace.credentials import sas_token

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_INIT = 0x41
ADDRESSES = [b"orders", b"orders/Subscriptions/all", b"$cbs", b"orders/$management", b"work", b"\xff\xfe", b""]


def frame(body: bytes, channel: int = 0, kind: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, kind, channel) + body


def described_list(code: int, fields: list[bytes]) -> bytes:
    return b"\x00\x53" + bytes([code]) + amqp_list(fields)


def amqp_list(items: list[bytes]) -> bytes:
    payload = b"".join(items)
    if len(payload) < 255 and len(items) < 256:
        return b"\xc0" + bytes([len(payload) + 1, len(items)]) + payload
    return b"\xd0" + struct.pack(">II", len(payload) + 4, len(items)) + payload


def str8(data: bytes, code: int = 0xA1) -> bytes:
    if len(data) < 256:
        return bytes([code]) + bytes([len(data)]) + data
    return bytes([code + 0x10]) + struct.pack(">I", len(data)) + data


def uint32(n: int) -> bytes:
    return b"\x70" + struct.pack(">I", n & 0xFFFFFFFF)


def handshake() -> bytes:
    return (
        b"AMQP\x03\x01\x00\x00"
        + frame(b"\x00\x53\x41" + amqp_list([str8(b"ANONYMOUS", 0xA3)]), kind=1)
        + b"AMQP\x00\x01\x00\x00"
    )


def value(rng: random.Random, depth: int = 0) -> bytes:
    """One AMQP-encoded value of a random type (sometimes a malformed one)."""
    choice = rng.randrange(14 if depth < 2 else 11)
    if choice == 0:
        return b"\x40"
    if choice == 1:
        return rng.choice([b"\x41", b"\x42", b"\x56\x00", b"\x56\x02"])
    if choice == 2:
        return b"\x52" + bytes([rng.randrange(256)])
    if choice == 3:
        return uint32(rng.choice([0, 1, 2, 255, 2**31, 2**32 - 1]))
    if choice == 4:
        return b"\x80" + struct.pack(">Q", rng.choice([0, 1, 2**63, 2**64 - 1]))
    if choice == 5:
        return str8(_text(rng))
    if choice == 6:
        return str8(_text(rng), 0xA3)
    if choice == 7:
        return str8(bytes(rng.randrange(256) for _ in range(rng.choice([0, 4, 300]))), 0xA0)
    if choice == 8:
        return b"\x98" + bytes(rng.randrange(256) for _ in range(16))
    if choice == 9:
        return b"\x83" + struct.pack(">q", rng.randrange(-(2**63), 2**63))
    if choice == 10:
        return bytes([rng.randrange(256)])  # an unknown or truncated constructor
    if choice == 11:
        return amqp_list([value(rng, depth + 1) for _ in range(rng.randrange(4))])
    if choice == 12:
        pairs = [value(rng, depth + 1) for _ in range(2 * rng.randrange(3))]
        payload = b"".join(pairs)
        return b"\xc1" + bytes([len(payload) + 1 & 0xFF, len(pairs)]) + payload
    return b"\x00" + value(rng, depth + 1) + value(rng, depth + 1)  # described


def _text(rng: random.Random) -> bytes:
    pick = rng.randrange(5)
    if pick == 0:
        return rng.choice(ADDRESSES)
    if pick == 1:
        return bytes(rng.randrange(256) for _ in range(rng.choice([1, 3, 40])))  # rarely UTF-8
    if pick == 2:
        return "é中\u212a".encode()[: rng.randrange(1, 9)]  # may end inside a character
    if pick == 3:
        return b"x" * rng.choice([255, 256, 70_000])
    return b"link-" + str(rng.randrange(3)).encode()


def terminus(rng: random.Random, code: int) -> bytes:
    fields = [str8(rng.choice(ADDRESSES)) if rng.random() < 0.8 else value(rng)]
    fields += [value(rng) for _ in range(rng.randrange(0, 4))]
    return described_list(code, fields)


def performative(rng: random.Random) -> bytes:
    code = rng.choice([ATTACH] * 4 + [FLOW, TRANSFER, TRANSFER, DISPOSITION, DETACH, END, CLOSE, BEGIN, OPEN, 0x20, 0x44])
    if code == ATTACH:
        fields = [
            str8(_text(rng)) if rng.random() < 0.9 else value(rng),
            uint32(rng.randrange(3)) if rng.random() < 0.9 else value(rng),
            rng.choice([b"\x41", b"\x42"]) if rng.random() < 0.9 else value(rng),
            value(rng), value(rng),
            terminus(rng, 0x28) if rng.random() < 0.8 else value(rng),
            terminus(rng, 0x29) if rng.random() < 0.8 else value(rng),
        ]
        fields += [value(rng) for _ in range(rng.randrange(0, 6))]
    elif code == TRANSFER:
        fields = [uint32(rng.randrange(3)), uint32(rng.randrange(5)), str8(_text(rng), 0xA0)]
        fields += [value(rng) for _ in range(rng.randrange(0, 5))]
        body = described_list(code, fields)
        payload = rng.choice([b"", b"\x00Sw\xa1\x02hi", bytes(rng.randrange(256) for _ in range(rng.randrange(64)))])
        return frame(body + payload, channel=rng.choice([0, 0, 0, 1]))
    else:
        fields = [value(rng) for _ in range(rng.randrange(0, 8))]
    return frame(described_list(code, fields), channel=rng.choice([0, 0, 0, 1, 65535]))


def session(rng: random.Random) -> bytes:
    """A client's whole input: a (mostly) valid start, random performatives, then byte-level mutation."""
    start = handshake() + frame(described_list(OPEN, [str8(b"fuzz")])) + frame(
        described_list(BEGIN, [b"\x40", uint32(0), uint32(4096), uint32(4096)])
    )
    data = start + b"".join(performative(rng) for _ in range(rng.randrange(1, 8)))
    return mutate(rng, data, keep=len(start) if rng.random() < 0.7 else 0)


def mutate(rng: random.Random, data: bytes, keep: int = 0) -> bytes:
    """``data`` with a few random byte-level changes after its first ``keep`` bytes."""
    out = bytearray(data)
    for _ in range(rng.choice([0, 0, 1, 2, 5])):
        if len(out) <= keep:
            break
        at = rng.randrange(keep, len(out))
        action = rng.randrange(4)
        if action == 0:
            out[at] = rng.randrange(256)
        elif action == 1:
            del out[at:]
        elif action == 2:
            out[at:at] = out[at: at + rng.randrange(1, 32)]
        else:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    return bytes(out)


# -- valid sessions (the fuzzers' seeds) ------------------------------------------------------------
#: Tokens in the seeds expire in 2100, so they are valid for a live emulator as for the in-process one.
TOKEN_EXPIRY = 4_102_444_800


def encoded(code: int, fields: list[Any], channel: int = 0, payload: bytes = b"") -> bytes:
    """One frame carrying a well-formed performative (``fields`` as Python/proton values)."""
    return frame(encode_value(Described(ulong(code), fields)) + payload, channel)


def attach(name: str, handle: int, sender: bool, source: str, target: str) -> bytes:
    """An attach from the client's side: a sender (role false) or a receiver (role true)."""
    return encoded(ATTACH, [
        name, uint(handle), not sender, ubyte(0), ubyte(0),
        Described(ulong(0x28), [source]), Described(ulong(0x29), [target]),
    ])


def flow(handle: int, credit: int) -> bytes:
    return encoded(FLOW, [uint(0), uint(2**31 - 1), uint(0), uint(2**31 - 1), uint(handle), uint(0), uint(credit)])


def transfer(handle: int, delivery_id: int, message: bytes) -> bytes:
    return encoded(TRANSFER, [uint(handle), uint(delivery_id), b"%d" % delivery_id, uint(0), False], payload=message)


def start() -> bytes:
    """SASL ANONYMOUS, the AMQP header, open and begin: every session starts so."""
    return handshake() + encoded(OPEN, ["seed"]) + encoded(BEGIN, [None, uint(0), uint(2**31 - 1), uint(2**31 - 1)])


def finish(handles: int) -> bytes:
    """Detach every link, end the session, close the connection."""
    return b"".join(encoded(DETACH, [uint(h), True]) for h in range(handles)) + encoded(END, []) + encoded(CLOSE, [])


def put_token(audience: str, key: str = DEV_KEY) -> bytes:
    """Links to ``$cbs`` (handles 0, 1) and a put-token for ``audience`` on them."""
    token = sas_token(f"sb://emulator/{audience}", DEV_KEY_NAME, key, TOKEN_EXPIRY)
    request = encode_management_message(
        message_id="token-1", reply_to="cbs-replies",
        application_properties={
            "operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": f"sb://emulator/{audience}",
        },
        body=token,
    )
    return (
        attach("cbs-requests", 0, True, "cbs-requests", "$cbs")
        + attach("cbs-replies", 1, False, "$cbs", "cbs-replies")
        + flow(1, 10)
        + transfer(0, 0, request)
    )


def management(entity: str, requests: list[tuple[str, Any]]) -> bytes:
    """A put-token for ``entity``, then management requests (operation, body) on its ``$management``
    node (handles 2, 3), each answered on the reply link."""
    node = f"{entity}/$management"
    data = put_token(entity) + attach("mgmt-requests", 2, True, "mgmt-requests", node)
    data += attach("mgmt-replies", 3, False, node, "mgmt-replies") + flow(3, 100)
    for n, (operation, body) in enumerate(requests, start=1):
        request = encode_management_message(
            message_id=f"request-{n}", reply_to="mgmt-replies", application_properties={"operation": operation},
        ) + encode_value_section(body)
        data += transfer(2, n, request)
    return start() + data + finish(4)


def add_rule(name: str, sql: str, action: str | None = None) -> tuple[str, Any]:
    rule = model.Rule(name, model.SqlFilter(sql), model.SqlRuleAction(action) if action else model.NO_ACTION)
    return "com.microsoft:add-rule", codec.encode_add_rule_body(rule)


def disposition(delivery_id: int, state: Any) -> bytes:
    """The client (a receiver) settling a delivery it was sent."""
    return encoded(DISPOSITION, [True, uint(delivery_id), uint(delivery_id), True, state])


def receive(entity: str, source_filter: dict[Any, Any] | None = None) -> bytes:
    """Publish four messages of one session to ``entity``, receive them peek-lock (the server's deliveries 1-4: the
    put-token answer was 0) and settle each a different way."""
    properties = ["m", None, None, None, None, None, None, None, None, None, "session-1"]  # group-id: the session
    message = encode_value(Described(ulong(0x73), properties)) + encode_value_section("hello")
    source = Described(ulong(0x28), [entity, None, None, None, None, None, None, source_filter])
    rejected = Described(ulong(0x25), [Described(ulong(0x1D), [symbol("amqp:rejected"), "no", {"DeadLetterReason": "why"}])])
    return (
        start() + put_token(entity.split("/")[0]) + attach("pub", 2, True, "pub", entity.split("/")[0])
        + b"".join(transfer(2, n, message) for n in range(1, 5))
        + encoded(ATTACH, ["sub", uint(3), True, ubyte(0), ubyte(1), source, Described(ulong(0x29), ["sub"])])
        + flow(3, 10)
        + disposition(1, Described(ulong(0x24), []))
        + disposition(2, rejected)
        + disposition(3, Described(ulong(0x26), []))
        + disposition(4, Described(ulong(0x27), [True, True, {symbol("x"): 1}]))
        + finish(4)
    )


def seeds() -> dict[str, bytes]:
    """Valid sessions that reach each part of the server: the fuzzers start from these and the corpus."""
    subscription = "orders/Subscriptions/all"
    message = encode_management_message(message_id="m-1", application_properties={"region": "eu"}, body="hello")
    return {
        "put-token": start() + put_token("orders") + finish(2),
        "put-token-bad-key": start() + put_token("orders", key="wrong") + finish(2),
        "add-rule-sql": management(subscription, [
            add_rule("eu", "region = 'eu' AND amount > 10.5 OR sys.Label LIKE 'a%' ESCAPE '!'", "SET x = 1"),
            add_rule("in", "region IN ('eu', 'us') AND NOT EXISTS(priority) AND name IS NULL"),
            ("com.microsoft:enumerate-rules", {"top": 10, "skip": 0}),
            ("com.microsoft:remove-rule", {"rule-name": "eu"}),
        ]),
        "add-rule-bad-sql": management(subscription, [add_rule("bad", "region = = 'eu'")]),
        "peek-and-sessions": management(subscription, [
            ("com.microsoft:peek-message", {"from-sequence-number": 0, "message-count": 5}),
            ("com.microsoft:get-message-sessions", {"skip": 0, "top": 10}),
        ]),
        "queue-operations": management("work", [
            ("com.microsoft:schedule-message", {"messages": [{"message": message, "message-id": "s-1"}]}),
            ("com.microsoft:peek-message", {"from-sequence-number": 0, "message-count": 5}),
            ("com.microsoft:cancel-scheduled-message", {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, 1)}),
            ("com.microsoft:receive-by-sequence-number", {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, 1)}),
            ("com.microsoft:renew-lock", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, uuid.UUID(int=1))}),
            ("com.microsoft:update-disposition", {
                "lock-tokens": Array(UNDESCRIBED, Data.UUID, uuid.UUID(int=1)), "disposition-status": "completed",
            }),
            ("com.microsoft:batch-delete-messages", {"message-count": 10, "enqueued-time-utc": timestamp(2**40)}),
            ("com.microsoft:set-session-state", {"session-id": "s", "session-state": b"state"}),
            ("com.microsoft:get-session-state", {"session-id": "s"}),
            ("com.microsoft:renew-session-lock", {"session-id": "s"}),
        ]),
        "receive-and-settle": receive("work"),
        "receive-session": receive("orders/Subscriptions/sessions", {symbol("com.microsoft:session-filter"): None}),
        "publish-and-receive": start() + put_token("orders") + attach("pub", 2, True, "pub", "orders")
        + transfer(2, 1, message) + attach("sub", 3, False, subscription, "sub") + flow(3, 10) + finish(4),
    }


NAMES = {ATTACH: "attach", FLOW: "flow", TRANSFER: "transfer", DISPOSITION: "disposition", DETACH: "detach", END: "end", CLOSE: "close"}
#: Where each performative that can carry an error has it (AMQP 1.0 §2.7).
ERROR_FIELD = {DETACH: 2, END: 0, CLOSE: 0}


def errors(answer: bytes) -> list[tuple[str, str]]:
    """The errors in what the emulator wrote back: (performative, condition) for each detach, end or
    close that carries one, and ("disposition", condition) for each rejected delivery."""
    found = []
    at = 0
    while at + 8 <= len(answer):
        if answer.startswith(b"AMQP", at):
            at += 8
            continue
        size, kind = struct.unpack_from(">I", answer, at)[0], answer[at + 5]
        body = answer[at + 4 * answer[at + 4]: at + size]
        at += size
        if kind != 0 or not body:
            continue
        try:
            performative, _ = read_value(body, 0)
        except DecodeError:  # an attach echoing a client's undecodable name or address
            continue
        code, fields = int(performative.descriptor), performative.value
        if code in ERROR_FIELD and len(fields) > ERROR_FIELD[code] and fields[ERROR_FIELD[code]] is not None:
            found.append((NAMES[code], str(fields[ERROR_FIELD[code]].value[0])))
        elif code == DISPOSITION and len(fields) > 4 and getattr(fields[4], "descriptor", None) == 0x25:
            found.append(("disposition", str(fields[4].value[0].value[0])))
    return found


def send(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Write ``data`` to the emulator and read until it closes (or stops answering); what it sent back."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:  # reset or timed out: the server decided, the test checks what follows
            pass
    return bytes(received)


def answer_to(port: int, data: bytes, until: bytes, timeout: float = 5.0) -> bytes:
    """Write ``data`` and keep the connection open, reading until the answer contains ``until`` (or ends)."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        try:
            while until not in received and (chunk := sock.recv(65536)):
                received += chunk
        except OSError:
            pass
    return bytes(received)
