"""Raw AMQP 1.0 client bytes for fuzzing the emulator: frames built by hand, fields chosen at random.

A session is the SASL ANONYMOUS exchange, the AMQP header, open and begin (each of which may itself be
mangled), then performatives (attach, flow, transfer, disposition, detach, end, close) whose fields
are random AMQP values: strings and symbols that are not UTF-8, wrong types, huge sizes, nested lists.
``mutate`` then flips, cuts, repeats or splices bytes, so the frame layer is exercised too.
"""

from __future__ import annotations

import random
import socket
import struct

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


def uint(n: int) -> bytes:
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
        return uint(rng.choice([0, 1, 2, 255, 2**31, 2**32 - 1]))
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
            uint(rng.randrange(3)) if rng.random() < 0.9 else value(rng),
            rng.choice([b"\x41", b"\x42"]) if rng.random() < 0.9 else value(rng),
            value(rng), value(rng),
            terminus(rng, 0x28) if rng.random() < 0.8 else value(rng),
            terminus(rng, 0x29) if rng.random() < 0.8 else value(rng),
        ]
        fields += [value(rng) for _ in range(rng.randrange(0, 6))]
    elif code == TRANSFER:
        fields = [uint(rng.randrange(3)), uint(rng.randrange(5)), str8(_text(rng), 0xA0)]
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
        described_list(BEGIN, [b"\x40", uint(0), uint(4096), uint(4096)])
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
